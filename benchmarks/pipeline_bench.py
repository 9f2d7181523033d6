"""Throughput of the data pipeline: prepare, then packed tokens/s from prepared GUM.

  python benchmarks/pipeline_bench.py [--gum PATH] [--tokenizer gpt2|word] [--seconds 4]
      [--workers 0,1,2] [--configurations terminal,tree,tgtree] [--seq-len 2048] [--batch 8]

prepare: GUM PTB files → ArrayRecord (read + normalize + lin1 base + write), in lin1 tokens/s.
pipeline: `grain_pipeline` (global shuffle → decode → tokenize → linearize → pack → batch →
metadata/targets → worker prefetch), consumed in this process; packed tokens = tokens in rows that
are not padding. Worker start-up is excluded (two warm-up batches). "per core" divides by the
processes doing the work: 1 for 0 workers (this process), else the worker count (the consuming
process only unpickles). On a machine with fewer free cores than workers + 1 the per-core figure
understates. The Parquet rows stream GUM stored as PTB text in a `text` column (no prepare: every
document's trees are parsed on the fly), with 0 workers.

Then: how many such cores a TPU v5p host needs to feed a 1B run. Assumptions (printed): 4 chips
per host, 459 TFLOP/s bf16 peak per chip, 50% MFU, FLOPs per token 6·N + 12·L·d·T (PaLM's
accounting, attention not halved for causality) with N = 1.07e9 non-embedding parameters,
L = 16, d = 2048 (the 1b scale) and T = 2048.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slm_jax.configurations import CONFIGURATIONS  # noqa: E402
from slm_jax.data.documents import DocumentSource, prepare  # noqa: E402
from slm_jax.data.grain_pipeline import PipelineOptions, build_iterator  # noqa: E402
from slm_jax.kinds import Kind  # noqa: E402
from slm_jax.tokenizer import make_tokenizer  # noqa: E402
from tests.shared_data import shared_data_dir  # noqa: E402

V5P_PEAK = 459e12  # bf16 FLOP/s per chip
CHIPS_PER_HOST = 4
MFU = 0.5
N_NON_EMBEDDING = 1.07e9
LAYERS, D_MODEL, SEQ = 16, 2048, 2048


def _tokenizer(kind: str, source: DocumentSource):
  if kind == "word":
    words = (str(w) for i in range(len(source))
             for w, k in zip(source[i].base.tokens, source[i].base.kinds) if k == Kind.TERMINAL)
    return make_tokenizer("word", words=words)
  return make_tokenizer(kind)


def measure(source: str, path: pathlib.Path, tokenizer, configuration: str, workers: int,
            seq_len: int, batch: int, seconds: float) -> float:
  options = PipelineOptions(seq_len=seq_len, batch_size=batch, worker_count=workers,
                            prefetch=2, shuffle_seed=0, window_shuffle=64)
  iterator, _ = build_iterator(source, [path], tokenizer, CONFIGURATIONS[configuration], options)
  try:
    for _ in range(2):
      next(iterator)
    packed, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
      packed += int((next(iterator).meta.segment > 0).sum())
    return packed / (time.perf_counter() - start)
  finally:
    iterator.close()


def _write_parquet(gum: str, path: pathlib.Path) -> bool:
  """GUM as FineWeb-layout Parquet with PTB trees in `text` (the streaming source's input)."""
  try:
    import pyarrow as pa  # pylint: disable=g-import-not-at-top
    import pyarrow.parquet as pq  # pylint: disable=g-import-not-at-top
  except ImportError:
    return False
  files = sorted(pathlib.Path(gum).glob("*.ptb"))
  table = pa.table({"text": [f.read_text(encoding="utf-8") for f in files],
                    "id": [f.name for f in files]})
  pq.write_table(table, path, row_group_size=16)
  return True


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  shared = shared_data_dir()
  parser.add_argument("--gum", default=str(shared / "gum" / "const") if shared else None)
  parser.add_argument("--tokenizer", default="gpt2", choices=("gpt2", "word"))
  parser.add_argument("--configurations", default="terminal,tree,tgtree")
  parser.add_argument("--workers", default="0,1,2")
  parser.add_argument("--seq-len", type=int, default=SEQ)
  parser.add_argument("--batch", type=int, default=8)
  parser.add_argument("--seconds", type=float, default=4.0)
  args = parser.parse_args()
  if not args.gum or not pathlib.Path(args.gum).is_dir():
    print("GUM not found: pass --gum PATH (../shared/data/gum/const)", file=sys.stderr)
    return 2

  with tempfile.TemporaryDirectory() as tmp:
    prepared = pathlib.Path(tmp) / "gum"
    result = prepare([args.gum], prepared)
    counts = result.counts
    print(f"prepare: {counts.documents_out} documents, {counts.tokens_out:,} lin1 tokens "
          f"({counts.notes['words']:,} words) in {result.seconds:.2f} s: "
          f"{counts.tokens_out / result.seconds:,.0f} lin1 tokens/s, "
          f"{counts.notes['words'] / result.seconds:,.0f} words/s (1 core)\n")
    source = DocumentSource(prepared)
    tokenizer = _tokenizer(args.tokenizer, source)
    # Steady state: the tokenizer's word cache holds the corpus vocabulary (on a large corpus it
    # holds the frequent words; GUM is small enough that one epoch caches all of it). Workers
    # start with a copy of this cache.
    start = time.perf_counter()
    for i in range(len(source)):
      record = source[i]
      tokenizer.encode_symbols(record.base.symbols(), record.base.kinds)
    print(f"tokenizer word cache warmed over GUM in {time.perf_counter() - start:.2f} s "
          f"(cold-cache tokenization of every GUM word once)\n")
    workers = [int(w) for w in args.workers.split(",")]
    rows = []
    print(f"{'source':<12} {'configuration':<14} {'scheme':<6} {'workers':>7} "
          f"{'packed tok/s':>13} {'per core':>10}   (seq {args.seq_len}, batch {args.batch}, "
          f"{args.tokenizer}, {os.cpu_count()} CPUs here)")
    for name in args.configurations.split(","):
      for w in workers:
        rate = measure("arrayrecord", prepared, tokenizer, name, w, args.seq_len, args.batch,
                       args.seconds)
        per_core = rate / max(1, w)
        rows.append((name, w, rate, per_core))
        print(f"{'arrayrecord':<12} {name:<14} {CONFIGURATIONS[name].linearization:<6} {w:>7} "
              f"{rate:>13,.0f} {per_core:>10,.0f}", flush=True)
    parquet = pathlib.Path(tmp) / "gum.parquet"
    if _write_parquet(args.gum, parquet):  # streaming without prepare: trees parsed per document
      for name in args.configurations.split(","):
        rate = measure("parquet", parquet, tokenizer, name, 0, args.seq_len, args.batch,
                       args.seconds)
        print(f"{'parquet':<12} {name:<14} {CONFIGURATIONS[name].linearization:<6} {0:>7} "
              f"{rate:>13,.0f} {rate:>10,.0f}", flush=True)

  flops_per_token = 6 * N_NON_EMBEDDING + 12 * LAYERS * D_MODEL * SEQ
  host_flops = CHIPS_PER_HOST * V5P_PEAK * MFU
  host_tokens = host_flops / flops_per_token
  print(f"\nTPU v5p host feeding a 1B run: {CHIPS_PER_HOST} chips × {V5P_PEAK / 1e12:.0f} TFLOP/s "
        f"× {MFU:.0%} MFU = {host_flops / 1e12:,.0f} TFLOP/s; FLOPs/token = 6·{N_NON_EMBEDDING:.3g}"
        f" + 12·{LAYERS}·{D_MODEL}·{SEQ} = {flops_per_token / 1e9:.2f} GFLOP "
        f"→ {host_tokens:,.0f} tokens/s per host")
  print("  (prepared ArrayRecord source; per core = the 0-worker row, where one process does all "
        "the work: the conservative figure)")
  for name in args.configurations.split(","):
    one = min((per_core for n, w, _, per_core in rows if n == name and w == 0),
              default=min(per_core for n, _, _, per_core in rows if n == name))
    print(f"  {name:<14} {one:>9,.0f} packed tokens/s per core → "
          f"{host_tokens / one:.2f} cores per host ({-(-host_tokens // one):.0f} whole)")
  return 0


if __name__ == "__main__":
  sys.exit(main())
