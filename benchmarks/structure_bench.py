"""Throughput of normalize → linearize → metadata over all of GUM, vectorized vs the loop oracle.

  python benchmarks/structure_bench.py [--gum PATH] [--schemes lin0,lin1,lin2] [--repeats 3]

One process, one core (numpy is single-threaded for these ops). Stages:
  normalize   PTB text → normalized trees (slm_jax.ptb), reported in lin1 tokens/s
  base        trees → the lin1 base sequence of each document (one traversal per document)
  linearize   base → scheme (`derive`, numpy), per document: on symbols (object arrays, as
              `explain`) and on vocabulary ids (int32, as training: prepared shards store bases,
              the tokenizer maps them to ids, `derive` runs on the ids)
  metadata    `row_metadata` per linearized document, and per packed batch of 16 rows × 2048
              (documents sentence-packed by `pack_documents`, as the training pipeline's
              `Batch.from_rows` computes it; packing itself is not timed)
  loop        tests/oracle.py: recursive linearization + explicit stack walk, per document
Prints a table with two speedups over the loop doing the same work: `documents` = linearize on
symbols + per-document metadata; `training` = linearize on ids + per-batch metadata (the path a
training step's input takes). `from trees` adds the base traversal to the `documents` path (the
loop also starts from trees).
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slm_jax import ptb  # noqa: E402
from slm_jax.data.packing import pack_documents, stack_rows  # noqa: E402
from slm_jax.linearize import base_sequence, derive  # noqa: E402
from slm_jax.structure import row_metadata  # noqa: E402
from tests import oracle  # noqa: E402
from slm_jax import tables  # noqa: E402
from slm_jax.benchtools import best_of, parser as make_parser, shared_data_dir  # noqa: E402


def main() -> int:
  parser = make_parser(__doc__)
  shared = shared_data_dir()
  parser.add_argument("--gum", default=str(shared / "gum" / "const") if shared else None)
  parser.add_argument("--schemes", default="lin0,lin1,lin2,lin3,lin1_merge,pause2")
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--row-length", type=int, default=2048)
  parser.add_argument("--batch-rows", type=int, default=16)
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
  vocabulary: dict[str, int] = {}
  id_bases = [dataclasses.replace(b, tokens=np.asarray(
      [vocabulary.setdefault(t, len(vocabulary)) for t in b.symbols()], np.int32)) for b in bases]
  print(tables.header(["scheme", "tokens", "linearize tok/s (symbols / ids)",
                       "metadata tok/s (per document / per 16×2048 batch)",
                       "lin+meta tok/s (documents / training)", "loop lin+meta tok/s",
                       "speedup documents", "speedup training", "speedup from trees"]))
  for scheme in args.schemes.split(","):
    if scheme == "lin1_shuf":  # the oracle has no shuffle
      continue
    t_lin, seqs = best_of(args.repeats, lambda: [derive(b, scheme) for b in bases])
    t_lin_ids, _ = best_of(args.repeats, lambda: [
        derive(b, scheme, pause_token=len(vocabulary), merged_close_token=len(vocabulary) + 1)
        for b in id_bases])
    tokens = sum(len(s) for s in seqs)
    ones = [np.ones(len(s), np.int32) for s in seqs]
    t_meta, _ = best_of(args.repeats, lambda: [row_metadata(s.kinds, o)
                                               for s, o in zip(seqs, ones)])
    rows, _ = pack_documents(seqs, args.row_length, pad_token="<pad>", token_dtype=object)
    packed = stack_rows(rows)
    batches = [(packed.kinds[i:i + args.batch_rows], packed.segment[i:i + args.batch_rows])
               for i in range(0, len(rows), args.batch_rows)]
    packed_tokens = int((packed.segment != 0).sum())
    t_batch, _ = best_of(args.repeats, lambda: [row_metadata(k, g) for k, g in batches])

    def loop():
      total = 0
      for document in loop_docs:
        _, kinds = oracle.loop_linearize(document, scheme)
        oracle.stack_walk_metadata(kinds)
        total += len(kinds)
      return total

    t_loop, loop_tokens = best_of(1, loop)
    slow = loop_tokens / t_loop
    documents_rate = tokens / (t_lin + t_meta)
    training_rate = 1 / (t_lin_ids / tokens + t_batch / packed_tokens)
    from_trees = tokens / (t_lin + t_meta + t_base)
    print(tables.row([scheme, f"{tokens:,}",
                      f"{tokens / t_lin / 1e6:.1f}M / {tokens / t_lin_ids / 1e6:.1f}M",
                      f"{tokens / t_meta / 1e6:.1f}M / {packed_tokens / t_batch / 1e6:.1f}M",
                      f"{documents_rate / 1e6:.1f}M / {training_rate / 1e6:.1f}M",
                      f"{slow / 1e3:,.0f}k", f"{documents_rate / slow:.1f}×",
                      f"{training_rate / slow:.1f}×", f"{from_trees / slow:.1f}×"]), flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
