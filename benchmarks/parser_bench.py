"""Throughput of the chart parser on CPU: Viterbi parsing, K-sample proposals, CRF training.

  python benchmarks/parser_bench.py [--model DIR] [--sentences 200] [--k 300] [--repeats 2]

Sentences are GUM dev's (the words of the gold trees; `--gum PATH`), or generated words when GUM
is absent. Rows:
  parse        `Parser.parse` (encoder + Viterbi CKY + debinarization), sentences/s
  proposals    `Parser.proposals_batch` with K samples each (exact CRF samples, dedupe, sort),
               sentences/s, on the first `--proposal-sentences`
  train step   one jitted training step of one scorer (the default config's: CRF NLL + the POS
               head at `tag_weight`, forward + backward + AdamW), words/s, per bucket (padded
               length N, batch_words // N sentences); for an ensemble, of its first member
               (members train one after another)
Compilation is excluded (one warm-up call per shape); the best of `--repeats` is reported. No timed
assertions anywhere: this prints a table.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from flax import nnx  # noqa: E402

from slm_jax.parser import labels as label_lib  # noqa: E402
from slm_jax.parser.api import load_parser  # noqa: E402
from slm_jax.parser.config import named_config  # noqa: E402
from slm_jax.parser.model import Ensemble, PosTagger, TrainedParser  # noqa: E402
from slm_jax.parser.corpus import gum_split_files, read_sentences  # noqa: E402
from slm_jax.parser.train import Example, encode_batch, parser_state, rows_for  # noqa: E402
from slm_jax import tables  # noqa: E402
from slm_jax.benchtools import best_of  # noqa: E402
from tests.shared_data import shared_data_dir  # noqa: E402


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  shared = shared_data_dir()
  parser.add_argument("--gum", default=str(shared / "gum") if shared else None)
  parser.add_argument("--model", default=None, help="parser folder (default: the shipped one)")
  parser.add_argument("--sentences", type=int, default=200)
  parser.add_argument("--proposal-sentences", type=int, default=20)
  parser.add_argument("--k", type=int, default=300)
  parser.add_argument("--repeats", type=int, default=2)
  parser.add_argument("--train-buckets", default="16,32,48")
  args = parser.parse_args()

  model = load_parser(args.model)
  if args.gum and pathlib.Path(args.gum).is_dir():
    files, _ = gum_split_files("dev", args.gum)
    trees = read_sentences(files)[:args.sentences]
    sentences = [t.leaves() for t in trees]
    source = f"GUM dev, first {len(sentences)} sentences"
  else:
    rng = np.random.default_rng(0)
    sentences = [[f"w{k}" for k in range(int(n))] for n in rng.integers(3, 40, args.sentences)]
    trees = [label_lib.debinarize(s, np.array([(0, len(s), 1)]), model.labels)
             for s in sentences]
    source = f"{len(sentences)} generated sentences"
  words = sum(map(len, sentences))
  members = len(model.model.members) if isinstance(model.model, Ensemble) else 1
  print(f"{source}: {words} words, mean length {words / len(sentences):.1f}; "
        f"model {model.source} ({members} member{'s' * (members > 1)}); "
        f"JAX {jax.__version__} on {jax.devices()[0].platform}")

  print(tables.header(["measurement", "size", "time (s)", "rate"]))
  model.parse(sentences)  # compile every bucket
  t_parse, _ = best_of(args.repeats, lambda: model.parse(sentences))
  print(tables.row(["parse (Viterbi)", f"{len(sentences)} sentences", f"{t_parse:.2f}",
                    f"{len(sentences) / t_parse:,.1f} sentences/s ({words / t_parse:,.0f} "
                    "words/s)"]))

  few = sentences[:args.proposal_sentences]
  model.proposals_batch(few, args.k, seed=0)
  t_prop, found = best_of(args.repeats, lambda: model.proposals_batch(few, args.k, seed=0))
  distinct = np.mean([len(f) for f in found])
  print(tables.row([f"proposals K={args.k}", f"{len(few)} sentences", f"{t_prop:.2f}",
                    f"{len(few) / t_prop:,.2f} sentences/s (mean {distinct:.0f} distinct "
                    "trees)"]))

  cfg = named_config("default")
  scorer = model.model.members[0] if members > 1 else model.model
  pos_tags = 47  # GUM train's 46 tags + "no tag"; every word gets tag 1 (same cost as real tags)
  net = TrainedParser(scorer, PosTagger(scorer.cfg, pos_tags, nnx.Rngs(0)), cfg.tag_weight)
  net.train()  # dropout on, as in training
  _, _, state = parser_state(net, cfg, 1)
  step = state.step_fn(hyperparams=lambda step: {"learning_rate": 1e-3})
  examples = [Example(t.leaves(), label_lib.binarize(t, model.labels),
                      np.ones(len(t.leaves()), np.int32)) for t in trees]
  keep = np.ones(len(model.vocab.words), np.float32)
  for N in (int(n) for n in args.train_buckets.split(",")):
    chosen = [k for k, e in enumerate(examples) if len(e.words) <= N][:rows_for(N, cfg)]
    if not chosen:
      continue
    batch = encode_batch(examples, N, chosen, rows_for(N, cfg), model.vocab, cfg, keep,
                         np.random.default_rng(0))

    def run():  # a copy of the same state each time: the step donates the state it is given
      out = step(jax.tree.map(jnp.copy, state.state), batch, 0)
      jax.block_until_ready(out)

    run()
    t_step, _ = best_of(args.repeats, run)
    real = sum(len(examples[k].words) for k in chosen)
    print(tables.row([f"train step N={N}", f"{len(chosen)} sentences, {real} words",
                      f"{t_step:.3f}", f"{real / t_step:,.0f} words/s"]))
  return 0


if __name__ == "__main__":
  sys.exit(main())
