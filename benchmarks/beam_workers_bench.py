"""Apache Beam local-runner throughput of the prepare stage: 1 vs N worker processes.

  python benchmarks/beam_workers_bench.py [--gum PATH] [--workers 1,2] [--num-shards 8]
                                          [--repeats 2]

Each run is `python -m slm_jax.beam_pipelines prepare --output=TMP --num_shards=S --workers=N
GUM` in a fresh process (the DirectRunner in multi-processing mode for N > 1), timed from start
to exit, so worker start-up is included, as a user meets it. GUM (263 PTB documents) is small, so
start-up weighs heavily; the table shows documents/s of the whole run, the
best of `--repeats`, and the speed-up over the first worker count. The outputs of every run are
compared file by file (the stage is deterministic: the same shards whatever the worker count).
"""

from __future__ import annotations

import filecmp
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slm_jax.benchtools import parser as make_parser, table  # noqa: E402
from slm_jax.cli import shared_data_dir  # noqa: E402


def _run(gum: pathlib.Path, out: pathlib.Path, workers: int, shards: int) -> float:
  start = time.perf_counter()
  subprocess.run([sys.executable, "-m", "slm_jax.beam_pipelines", "prepare", f"--output={out}",
                  f"--num_shards={shards}", f"--workers={workers}", str(gum)], cwd=ROOT,
                 check=True, capture_output=True)
  return time.perf_counter() - start


def _same(a: pathlib.Path, b: pathlib.Path) -> bool:
  files_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
  files_b = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
  return files_a == files_b and all(
      filecmp.cmp(a / f, b / f, shallow=False) for f in files_a if f.suffix != ".json")


def main() -> int:
  parser = make_parser(__doc__)
  parser.add_argument("--gum", default=None, help="GUM const/ folder (default: shared data)")
  parser.add_argument("--workers", default="1,2")
  parser.add_argument("--num-shards", type=int, default=8)
  parser.add_argument("--repeats", type=int, default=2)
  args = parser.parse_args()
  shared = shared_data_dir()
  gum = pathlib.Path(args.gum) if args.gum else (shared / "gum" / "const" if shared else None)
  if gum is None or not gum.is_dir():
    print("GUM not found: pass --gum", file=sys.stderr)
    return 2
  documents = sorted(gum.glob("*.ptb"))
  rows, first, outputs = [], None, []
  with tempfile.TemporaryDirectory() as tmp:
    for workers in [int(w) for w in args.workers.split(",")]:
      best = min(_run(gum, pathlib.Path(tmp) / f"w{workers}_{r}", workers, args.num_shards)
                 for r in range(args.repeats))
      outputs.append(pathlib.Path(tmp) / f"w{workers}_0")
      first = first or best
      rows.append((workers, args.num_shards, len(documents), f"{best:.1f}",
                   f"{len(documents) / best:.1f}", f"{first / best:.2f}x"))
    same = all(_same(outputs[0], o) for o in outputs[1:])
  print(f"prepare on the Beam DirectRunner: {len(documents)} GUM documents, best of "
        f"{args.repeats}; outputs identical: {'yes' if same else 'NO'}")
  print(table(("workers", "shards", "documents", "seconds", "documents/s", "speed-up"), rows))
  return 0


if __name__ == "__main__":
  sys.exit(main())
