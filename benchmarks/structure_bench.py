"""Throughput of normalize → linearize → metadata over all of GUM, vectorized vs the loop oracle.

  python benchmarks/structure_bench.py [--gum PATH] [--schemes lin0,lin1,lin2] [--repeats 3]

One process, one core (numpy is single-threaded for these ops). Stages:
  normalize   PTB text → normalized trees (slm_jax.ptb), reported in lin1 tokens/s
  base        trees → the lin1 base sequence of each document (one traversal per document)
  linearize   base → scheme (`derive`, numpy)
  metadata    `row_metadata` of each linearized document (numpy)
  loop        tests/oracle.py: recursive linearization + explicit stack walk, per document
Prints a table; the ratio column is (linearize + metadata) vs the loop doing the same work, and
`from trees` adds the base traversal to the fast path (the loop also starts from trees).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slm_jax import ptb  # noqa: E402
from slm_jax.linearize import base_sequence, derive  # noqa: E402
from slm_jax.structure import row_metadata  # noqa: E402
from tests import oracle  # noqa: E402
from tests.shared_data import shared_data_dir  # noqa: E402


def best_of(repeats: int, fn):
  best, result = float("inf"), None
  for _ in range(repeats):
    start = time.perf_counter()
    result = fn()
    best = min(best, time.perf_counter() - start)
  return best, result


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  shared = shared_data_dir()
  parser.add_argument("--gum", default=str(shared / "gum" / "const") if shared else None)
  parser.add_argument("--schemes", default="lin0,lin1,lin2,lin3,lin1_merge,pause2")
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--loop-documents", type=int, default=0,
                      help="time the loop oracle on the first N documents only (0 = all)")
  args = parser.parse_args()
  if not args.gum or not pathlib.Path(args.gum).is_dir():
    print("GUM not found: pass --gum PATH (../shared/data/gum/const)", file=sys.stderr)
    return 2

  report = ptb.ReadReport()
  t_norm, documents = best_of(args.repeats, lambda: [
      trees for _, trees in ptb.read_folder(args.gum, report=ptb.ReadReport())])
  ptb.read_folder(args.gum, report=report)
  t_base, bases = best_of(args.repeats, lambda: [base_sequence(d) for d in documents])
  lin1_tokens = sum(len(b) for b in bases)
  words = sum(len(t.leaves()) for d in documents for t in d)
  print(f"GUM: {len(documents)} documents, {sum(len(d) for d in documents)} sentences, "
        f"{words} words, {lin1_tokens} lin1 tokens; {report.summary()}")
  print(f"normalize: {lin1_tokens / t_norm:,.0f} lin1 tokens/s   "
        f"base traversal: {lin1_tokens / t_base:,.0f} tokens/s\n")

  loop_docs = documents[:args.loop_documents] if args.loop_documents else documents
  header = ("| scheme | tokens | linearize tok/s | metadata tok/s | lin+meta tok/s | "
            "loop lin+meta tok/s | speedup | speedup from trees |")
  print(header)
  print("|---" * 8 + "|")
  for scheme in args.schemes.split(","):
    t_lin, seqs = best_of(args.repeats, lambda: [derive(b, scheme) for b in bases])
    tokens = sum(len(s) for s in seqs)
    ones = [np.ones(len(s), np.int32) for s in seqs]
    t_meta, _ = best_of(args.repeats, lambda: [row_metadata(s.kinds, o)
                                               for s, o in zip(seqs, ones)])

    def loop():
      total = 0
      for document in loop_docs:
        _, kinds = oracle.loop_linearize(document, scheme)
        oracle.stack_walk_metadata(kinds)
        total += len(kinds)
      return total

    if scheme == "lin1_shuf":  # the oracle has no shuffle
      continue
    t_loop, loop_tokens = best_of(1, loop)
    fast = tokens / (t_lin + t_meta)
    slow = loop_tokens / t_loop
    from_trees = tokens / (t_lin + t_meta + t_base)
    print(f"| {scheme} | {tokens:,} | {tokens / t_lin:,.0f} | {tokens / t_meta:,.0f} | "
          f"{fast:,.0f} | {slow:,.0f} | {fast / slow:.1f}× | {from_trees / slow:.1f}× |")
  return 0


if __name__ == "__main__":
  sys.exit(main())
