"""Parsed documents → a TensorFlow Datasets build of the corpus (read by `data.source=tfds`).

  python -m slm_jax.tfds_build --output=/data/tfds --name=gum ../shared/data/gum/const
  python -m slm_jax.tfds_build --output=/data/tfds --name=fineweb parsed/fineweb \\
      --split=validation=parsed/fineweb-heldout --beam_options="--direct_num_workers=16 \\
      --direct_running_mode=multi_processing"

Writes TFDS dataset `slm_corpus/NAME` (version 1.0.0) under the TFDS data_dir `--output`: one
example per document (id, its `slm_jax.document` record, token and sentence counts) in ArrayRecord
files, with TFDS's own `download_and_prepare`. Inputs are those of `python -m slm_jax.prepare`
(parse-stage output, PTB files/folders, JSONL, Parquet); the positional inputs are split `train`,
`--split=NAME=PATH[,PATH…]` adds another split. The dataset info holds the split sizes and, in
`metadata.json`, each split's inputs and accounting (what prepare's manifest counts). Beam
(`apache-beam` installed, or `--beam=on`) reads each input file as one Beam element; nothing
here needs TensorFlow. The library is `slm_jax.data.tfds_corpus.build_corpus`.
"""

from __future__ import annotations

import sys

from slm_jax import cli
from slm_jax.inputs import AUTO, TREE_INPUTS

_BEAM = {"auto": None, "on": True, "off": False}


def _split(text: str) -> tuple[str, list[str]]:
  name, sep, paths = text.partition("=")
  if not sep or not name or not paths:
    raise cli.CliError(f"--split must look like NAME=PATH[,PATH…], got {text!r}")
  return name, paths.split(",")


@cli.options
class TfdsBuildOptions:
  """The flags of `python -m slm_jax.tfds_build` (the module docstring)."""

  inputs: tuple[str, ...] = cli.option((), positional=True,
                                       help="the train split: PTB, JSONL, parse outputs")
  output: str = cli.option(help="the TFDS data_dir to build into")
  name: str = cli.option(help="corpus name: the dataset is slm_corpus/NAME")
  split: tuple[tuple[str, list[str]], ...] = cli.option(
      (), type=_split, help="NAME=PATH[,PATH…]: another split (repeat)")
  format: str = cli.option(AUTO, choices=(AUTO, *TREE_INPUTS.formats))
  strict: bool = cli.option(False, help="stop at the first malformed tree (default: skip and "
                            "count)")
  sentences_as_documents: bool = cli.option(False, help="one document per tree instead of per "
                                            "file / JSONL line")
  allow_partial: bool = cli.option(False, help="build from the finished shards of an unfinished"
                                   " parse (counted)")
  beam: str = cli.option("auto", choices=tuple(_BEAM), help="read the inputs with Apache Beam "
                         "(auto: when it is installed)")
  beam_options: str = cli.option("", help="Beam pipeline flags (one string)")
  overwrite: bool = cli.option(False, help="rebuild an existing build")

  def validate(self) -> None:
    if self.inputs and "train" in dict(self.split):
      raise cli.CliError("split train is given twice: positional inputs and --split=train=…")
    if not self.inputs and not self.split:
      raise cli.CliError("no inputs: give the train split's paths (or --split=NAME=PATH)")


def build(options: TfdsBuildOptions):
  """Builds the TFDS corpus of `options` (`tfds_corpus.build_corpus`'s result)."""
  splits = dict(options.split)
  if options.inputs:
    splits = {"train": list(options.inputs), **splits}
  from slm_jax.data.tfds_corpus import build_corpus  # pylint: disable=g-import-not-at-top
  return build_corpus(splits, options.output, name=options.name, fmt=options.format,
                      lenient=not options.strict,
                      sentences_as_documents=options.sentences_as_documents,
                      allow_partial=options.allow_partial, beam=_BEAM[options.beam],
                      beam_options=options.beam_options, overwrite=options.overwrite)


def _main(argv: list[str] | None) -> int:
  result = build(cli.parse_options(TfdsBuildOptions, argv, prog="python -m slm_jax.tfds_build",
                                   doc=__doc__))
  print(f"{result.path} ({'Beam' if result.beam else 'in process'}, {result.seconds:.1f} s)")
  for split, counts in result.counts.items():
    print(counts.summary(split))
  return cli.EXIT_OK


def main(argv: list[str] | None = None) -> int:
  return cli.run(_main, argv)


if __name__ == "__main__":
  sys.exit(main())
