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


def _parser() -> cli.ArgumentParser:
  parser = cli.ArgumentParser(prog="python -m slm_jax.tfds_build", description=__doc__)
  parser.add_argument("inputs", nargs="*", help="the train split: PTB, JSONL, parse outputs")
  parser.add_argument("--output", required=True, help="the TFDS data_dir to build into")
  parser.add_argument("--name", required=True, help="corpus name: the dataset is slm_corpus/NAME")
  parser.add_argument("--split", action="append", default=[], type=_split,
                      help="NAME=PATH[,PATH…]: another split (repeat)")
  parser.add_argument("--format", default=AUTO, choices=(AUTO, *TREE_INPUTS.formats))
  parser.add_argument("--strict", action="store_true",
                      help="stop at the first malformed tree (default: skip and count)")
  parser.add_argument("--sentences_as_documents", action="store_true",
                      help="one document per tree instead of per file / JSONL line")
  parser.add_argument("--allow_partial", action="store_true",
                      help="build from the finished shards of an unfinished parse (counted)")
  parser.add_argument("--beam", default="auto", choices=tuple(_BEAM),
                      help="read the inputs with Apache Beam (auto: when it is installed)")
  parser.add_argument("--beam_options", default="", help="Beam pipeline flags (one string)")
  parser.add_argument("--overwrite", action="store_true", help="rebuild an existing build")
  return parser


def _main(argv: list[str] | None) -> int:
  args = _parser().parse_args(argv)
  splits = dict(args.split)
  if args.inputs:
    if "train" in splits:
      raise cli.CliError("split train is given twice: positional inputs and --split=train=…")
    splits = {"train": args.inputs, **splits}
  if not splits:
    raise cli.CliError("no inputs: give the train split's paths (or --split=NAME=PATH)")
  from slm_jax.data.tfds_corpus import build_corpus  # pylint: disable=g-import-not-at-top
  result = build_corpus(splits, args.output, name=args.name, fmt=args.format,
                        lenient=not args.strict, sentences_as_documents=args.sentences_as_documents,
                        allow_partial=args.allow_partial, beam=_BEAM[args.beam],
                        beam_options=args.beam_options, overwrite=args.overwrite)
  print(f"{result.path} ({'Beam' if result.beam else 'in process'}, {result.seconds:.1f} s)")
  for split, counts in result.counts.items():
    print(counts.summary(split))
  return cli.EXIT_OK


def main(argv: list[str] | None = None) -> int:
  return cli.run(_main, argv)


if __name__ == "__main__":
  sys.exit(main())
