"""Layer-wise UUAS structural probe (SPEC §10, last bullet; GTCA seed `001_…`; Hewitt & Manning).

  python -m slm_jax.gtca.probe --workdir=RUN --split=0.8 --out=DIR [--rank=64] [--steps=2000]
  python -m slm_jax.gtca.probe --hf=FOLDER --train=A.mrg,B.mrg --test=C.mrg --out=DIR
  python -m slm_jax.gtca.probe --gtca=TRAIN_OUT --cache=CACHE --train=… --test=… --out=DIR
  python -m slm_jax.gtca.probe plot A/uuas.json B/uuas.json --label=base --label=gtca --out=cmp.png

`--gtca` probes a GTCA-trained run with its branch active (span trees from the parse cache) and
its frozen backbone, and plots both UUAS curves in DIR/uuas.png (`slm_jax.gtca.probe_gtca`).

What it measures, and how (word vectors, probes, UUAS, Spearman): `slm_jax.gtca.structural_probe`.
The probed sentences are the trees of the PTB files with ≥ 2 non-punctuation words
(`probe_trees`: head-rule dependencies); a word without a POS tag is punctuation when it is one
of evalb's punctuation words except # and $ (`PUNCT_WORDS`: PTB tags those two, and they head
their phrases: "$ 100").
"""

from __future__ import annotations

import pathlib
import sys
from typing import Callable, Sequence

import numpy as np

from slm_jax import cli, ptb
from slm_jax import inputs
from slm_jax.gtca.probe_trees import read_trees, sentences_from_trees
from slm_jax.gtca.structural_probe import PLOT_FILE, RESULTS_FILE, plot, probe_model, read_results
from slm_jax.parser.evalb import PUNCTUATION

PUNCT_WORDS = PUNCTUATION - {"#", "$"}  # untagged punctuation words (module docstring)


# --- the command line ---------------------------------------------------------------------------


def _files(values: Sequence[str] | None) -> list[str]:
  return [part for value in values or () for part in value.split(",") if part]


MODEL = cli.Exclusive("model", required=True)


@cli.options
class ProbeOptions:
  """The flags of `python -m slm_jax.gtca.probe` (the module docstring)."""

  checkpoint: str | None = cli.option(
      None, exclusive=MODEL, help="the model probed: a slm_jax training workdir, a Hugging Face "
      "checkpoint folder or a .gguf file", renamed_note="which names any model",
      renamed={"--workdir": "the old spelling of --checkpoint=WORKDIR",
               "--hf": "the old spelling of --checkpoint=FOLDER"})
  gtca: str | None = cli.option(None, exclusive=MODEL, help="a finished python -m "
                                "slm_jax.gtca.train run: probe its backbone and the run with the "
                                "branch active (--cache), one plot")
  cache: str | None = cli.option(None, help="--gtca: the parse cache of the probed sentences "
                                 "(python -m slm_jax.gtca.cache --ptb=FILES --workdir=BACKBONE "
                                 "--bos)")
  train: tuple[str, ...] | None = cli.option(None, help="PTB files/folders to train on (repeat "
                                             "or comma-separate)")
  test: tuple[str, ...] | None = cli.option(None, help="PTB files/folders to evaluate on")
  split: float | None = cli.option(None, help="instead of --train/--test: this fraction of "
                                   "--data's files (sorted) trains, the rest tests")
  data: str | None = cli.option(None, help="PTB files for --split (default "
                                "../shared/data/ptb_sample)")
  out: str = cli.option(help=f"folder for {RESULTS_FILE} and {PLOT_FILE}")
  label: str | None = cli.option(None, help="the run's name in the plot (default: the model "
                                 "folder's)")
  rank: int = cli.option(64)
  steps: int = cli.option(2000)
  batch_size: int = cli.option(32, help="sentences per probe step")
  learning_rate: float = cli.option(1e-3)
  forward_batch: int = cli.option(16, help="sentences per model forward")
  max_train: int | None = cli.option(None, help="a random subset of this many train sentences")
  max_test: int | None = cli.option(None, help="a random subset of this many test sentences")
  max_words: int | None = cli.option(None, help="skip sentences longer than this")
  layers: str | None = cli.option(None, help="comma-separated layers (default all; 0 = "
                                  "embeddings)")
  seed: int = cli.option(0)

  def validate(self) -> None:
    if self.rank < 1 or self.steps < 1 or self.batch_size < 1 or self.forward_batch < 1:
      raise cli.CliError("--rank, --steps, --batch_size and --forward_batch must be >= 1")
    if self.split is not None:
      if self.train or self.test:
        raise cli.CliError("give --split or --train/--test, not both")
      if not 0 < self.split < 1:
        raise cli.CliError(f"--split must be in (0, 1), got {self.split}")
    elif not self.train or not self.test:
      raise cli.CliError("give --train=FILES and --test=FILES, or --split=FRACTION")
    if self.gtca and not self.cache:
      raise cli.CliError("--gtca needs --cache (the span trees of the probed sentences)")


@cli.options
class ProbePlotOptions:
  """UUAS by layer of several probe results on one plot."""

  results: tuple[str, ...] = cli.option(positional=True, help=f"{RESULTS_FILE} files")
  label: tuple[str, ...] | None = cli.option(None, help="one per result (default: its label)")
  out: str = cli.option(help="the picture (.png, .pdf, .svg)")

  def validate(self) -> None:
    if self.label and len(self.label) != len(self.results):
      raise cli.CliError(f"{len(self.label)} --label for {len(self.results)} results")


def _subset(items: list, limit: int | None, rng: np.random.Generator) -> list:
  if limit is None or limit >= len(items):
    return items
  return [items[i] for i in sorted(rng.choice(len(items), limit, replace=False))]


def _split_files(options: ProbeOptions) -> tuple[list[str], list[str]]:
  if options.split is None:
    return _files(options.train), _files(options.test)
  data = (_files([options.data]) if options.data
          else [str(cli.shared_data("ptb_sample", "--data"))])
  files = [str(p) for p, _ in inputs.discover(data, inputs.ptb_files(ptb.DEFAULT_PATTERNS))]
  cut = int(round(options.split * len(files)))
  if not 0 < cut < len(files):
    raise cli.CliError(f"--split={options.split} of {len(files)} files under {data} leaves a "
                       "side empty")
  return files[:cut], files[cut:]


def _load(path: str):
  """(model, encode_word, bos_id, name) of the probed model (`train.models` says what the path
  is)."""
  from slm_jax.train import models  # pylint: disable=import-outside-toplevel
  if models.model_kind(path) == models.WORKDIR:
    run = models.open_model(path).run
    return run.model, run.tokenizer.encode_word, run.tokenizer.bos_id, pathlib.Path(path).name
  from slm_jax.gtca.backbone import frozen_model  # pylint: disable=import-outside-toplevel
  from slm_jax.hf.tokenizer import CheckpointTokenizer  # pylint: disable=import-outside-toplevel
  from slm_jax.tokenizer_bases import ptb_unescape  # pylint: disable=import-outside-toplevel
  tokenizer = CheckpointTokenizer(path)
  model = frozen_model(path)
  return (model, lambda word: tokenizer.encode(" " + ptb_unescape(word)), tokenizer.bos_id,
          pathlib.Path(path).name)


def probe(options: ProbeOptions, log: Callable[[str], None] = print) -> None:
  """Probes the model (or, `--gtca`, a GTCA run's backbone and branch) of `options`, writes
  RESULTS_FILE and PLOT_FILE under `options.out`."""
  train_files, test_files = _split_files(options)
  rng = np.random.default_rng(options.seed)
  probed = lambda files: sentences_from_trees(read_trees(files), PUNCT_WORDS, options.max_words)
  train = _subset(probed(train_files), options.max_train, rng)
  test = _subset(probed(test_files), options.max_test, rng)
  if not train or not test:
    raise cli.CliError(f"no probed sentences (≥ 2 non-punctuation words) in the "
                       f"{'training' if not train else 'test'} files")
  layers = (None if options.layers is None
            else [int(part) for part in options.layers.split(",") if part.strip()])
  settings = dict(layers=layers, rank=options.rank, steps=options.steps,
                  batch_size=options.batch_size, learning_rate=options.learning_rate,
                  forward_batch=options.forward_batch, seed=options.seed, log=log)
  if options.gtca:
    from slm_jax.gtca import probe_gtca  # pylint: disable=import-outside-toplevel
    probe_gtca.probe_backbone_and_gtca(options.gtca, options.cache, train, test, options.out,
                                       **settings)
    return
  model, encode_word, bos_id, name = _load(options.checkpoint)
  probe_model(model, encode_word, bos_id, train, test, options.out, label=options.label or name,
              extra={"model": options.checkpoint, "train_files": len(train_files),
                     "test_files": len(test_files)}, **settings)


def plot_results(options: ProbePlotOptions) -> list[str]:
  """One plot of the results files; the labels shown."""
  results = [read_results(path) for path in options.results]
  labels = list(options.label or [r.get("label") or pathlib.Path(p).parent.name
                                  for r, p in zip(results, options.results)])
  plot(list(zip(labels, results)), options.out)
  return labels


def _main(argv: list[str] | None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  if argv and argv[0] == "plot":
    options = cli.parse_options(ProbePlotOptions, argv[1:],
                                prog="python -m slm_jax.gtca.probe plot",
                                doc=ProbePlotOptions.__doc__)
    labels = plot_results(options)
    print(f"wrote {options.out}: {', '.join(labels)}")
    return cli.EXIT_OK
  options = cli.parse_options(ProbeOptions, argv, prog="python -m slm_jax.gtca.probe",
                              doc=__doc__)
  probe(options, log=lambda line: print(line, flush=True))
  return cli.EXIT_OK


def main(argv: list[str] | None = None) -> int:
  return cli.run(_main, argv)


if __name__ == "__main__":
  sys.exit(main())
