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
from typing import Sequence

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


def _parser() -> cli.ArgumentParser:
  parser = cli.ArgumentParser(prog="python -m slm_jax.gtca.probe", description=__doc__)
  source = parser.add_mutually_exclusive_group(required=True)
  source.add_argument("--checkpoint", help="the model probed: a slm_jax training workdir, a "
                      "Hugging Face checkpoint folder or a .gguf file")
  source.add_argument("--workdir", help="the old spelling of --checkpoint=WORKDIR")
  source.add_argument("--hf", help="the old spelling of --checkpoint=FOLDER")
  source.add_argument("--gtca", help="a finished python -m slm_jax.gtca.train run: probe its "
                      "backbone and the run with the branch active (--cache), one plot")
  parser.add_argument("--cache", help="--gtca: the parse cache of the probed sentences "
                      "(python -m slm_jax.gtca.cache --ptb=FILES --workdir=BACKBONE --bos)")
  parser.add_argument("--train", action="append", help="PTB files/folders to train on (repeat or "
                      "comma-separate)")
  parser.add_argument("--test", action="append", help="PTB files/folders to evaluate on")
  parser.add_argument("--split", type=float, help="instead of --train/--test: this fraction of "
                      "--data's files (sorted) trains, the rest tests")
  parser.add_argument("--data", help="PTB files for --split (default ../shared/data/ptb_sample)")
  parser.add_argument("--out", required=True, help=f"folder for {RESULTS_FILE} and {PLOT_FILE}")
  parser.add_argument("--label", help="the run's name in the plot (default: the model folder's)")
  parser.add_argument("--rank", type=int, default=64)
  parser.add_argument("--steps", type=int, default=2000)
  parser.add_argument("--batch_size", type=int, default=32, help="sentences per probe step")
  parser.add_argument("--learning_rate", type=float, default=1e-3)
  parser.add_argument("--forward_batch", type=int, default=16, help="sentences per model forward")
  parser.add_argument("--max_train", type=int, help="a random subset of this many train sentences")
  parser.add_argument("--max_test", type=int, help="a random subset of this many test sentences")
  parser.add_argument("--max_words", type=int, help="skip sentences longer than this")
  parser.add_argument("--layers", help="comma-separated layers (default all; 0 = embeddings)")
  parser.add_argument("--seed", type=int, default=0)
  return parser


def _plot_parser() -> cli.ArgumentParser:
  parser = cli.ArgumentParser(prog="python -m slm_jax.gtca.probe plot",
                              description="UUAS by layer of several probe results on one plot.")
  parser.add_argument("results", nargs="+", help=f"{RESULTS_FILE} files")
  parser.add_argument("--label", action="append", help="one per result (default: its label)")
  parser.add_argument("--out", required=True, help="the picture (.png, .pdf, .svg)")
  return parser


def _subset(items: list, limit: int | None, rng: np.random.Generator) -> list:
  if limit is None or limit >= len(items):
    return items
  return [items[i] for i in sorted(rng.choice(len(items), limit, replace=False))]


def _split_files(args) -> tuple[list[str], list[str]]:
  if args.split is not None:
    if args.train or args.test:
      raise cli.CliError("give --split or --train/--test, not both")
    if not 0 < args.split < 1:
      raise cli.CliError(f"--split must be in (0, 1), got {args.split}")
    data = _files([args.data]) if args.data else [str(cli.shared_data("ptb_sample", "--data"))]
    files = [str(p) for p, _ in inputs.discover(data, inputs.ptb_files(ptb.DEFAULT_PATTERNS))]
    cut = int(round(args.split * len(files)))
    if not 0 < cut < len(files):
      raise cli.CliError(f"--split={args.split} of {len(files)} files under {data} leaves a side "
                         "empty")
    return files[:cut], files[cut:]
  if not args.train or not args.test:
    raise cli.CliError("give --train=FILES and --test=FILES, or --split=FRACTION")
  return _files(args.train), _files(args.test)


def _load(args):
  """(model, encode_word, bos_id, name) of the probed model (`train.models` says what the path
  is)."""
  from slm_jax.train import models  # pylint: disable=import-outside-toplevel
  if args.workdir or args.hf:
    print(f"note: --{'workdir' if args.workdir else 'hf'} is the old spelling of --checkpoint "
          "(which names any model)", file=sys.stderr, flush=True)
  path = args.checkpoint or args.workdir or args.hf
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


def _main(argv: list[str] | None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  if argv and argv[0] == "plot":
    return _plot_main(argv[1:])
  args = _parser().parse_args(argv)
  log = lambda line: print(line, flush=True)
  if args.rank < 1 or args.steps < 1 or args.batch_size < 1 or args.forward_batch < 1:
    raise cli.CliError("--rank, --steps, --batch_size and --forward_batch must be >= 1")
  train_files, test_files = _split_files(args)
  rng = np.random.default_rng(args.seed)
  probed = lambda files: sentences_from_trees(read_trees(files), PUNCT_WORDS, args.max_words)
  train = _subset(probed(train_files), args.max_train, rng)
  test = _subset(probed(test_files), args.max_test, rng)
  if not train or not test:
    raise cli.CliError(f"no probed sentences (≥ 2 non-punctuation words) in the "
                       f"{'training' if not train else 'test'} files")
  layers = (None if args.layers is None
            else [int(part) for part in args.layers.split(",") if part.strip()])
  if args.gtca:
    if not args.cache:
      raise cli.CliError("--gtca needs --cache (the span trees of the probed sentences)")
    from slm_jax.gtca import probe_gtca  # pylint: disable=import-outside-toplevel
    probe_gtca.probe_backbone_and_gtca(
        args.gtca, args.cache, train, test, args.out, log=log, layers=layers, rank=args.rank,
        steps=args.steps, batch_size=args.batch_size, learning_rate=args.learning_rate,
        forward_batch=args.forward_batch, seed=args.seed)
    return cli.EXIT_OK
  model, encode_word, bos_id, name = _load(args)
  probe_model(model, encode_word, bos_id, train, test, args.out, layers=layers,
              label=args.label or name, rank=args.rank, steps=args.steps,
              batch_size=args.batch_size, learning_rate=args.learning_rate,
              forward_batch=args.forward_batch, seed=args.seed, log=log,
              extra={"model": args.checkpoint or args.workdir or args.hf, "train_files": len(train_files),
                     "test_files": len(test_files)})
  return cli.EXIT_OK


def _plot_main(argv: list[str]) -> int:
  args = _plot_parser().parse_args(argv)
  if args.label and len(args.label) != len(args.results):
    raise cli.CliError(f"{len(args.label)} --label for {len(args.results)} results")
  results = [read_results(path) for path in args.results]
  labels = args.label or [r.get("label") or pathlib.Path(p).parent.name
                          for r, p in zip(results, args.results)]
  plot(list(zip(labels, results)), args.out)
  print(f"wrote {args.out}: {', '.join(labels)}")
  return cli.EXIT_OK


def main(argv: list[str] | None = None) -> int:
  return cli.run(_main, argv)


if __name__ == "__main__":
  sys.exit(main())
