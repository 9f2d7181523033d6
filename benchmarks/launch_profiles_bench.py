"""The Triton launch profiles timed on this GPU, through the autotuner and its disk cache: the
table a `launch_profiles.CHIP_PROFILES` entry is chosen from.

  python benchmarks/launch_profiles_bench.py                 # GPU: the default buckets
  python benchmarks/launch_profiles_bench.py --interpret --buckets tg:64 --tokens 128 \\
      --heads 2 --kv-heads 1 --head-dim 16 --profiles old,lean   # CPU dry run (interpreter)

For each bucket (`attention:T`, B = --tokens / T rows of synthetic packed lin2 rows, in the order
given: the most valuable first), `autotune.choose` times every candidate (forward, and forward +
backward: the choice's key) at first use and writes the cache (--cache, else a fresh file under
$OUT or /tmp); a bucket already in the cache is read, not timed. Then every bucket is chosen again
as a new process would (`autotune.forget`), with a timer that fails if called: the cache must
answer. Prints the per-bucket table (ms, and each profile's fwd+bwd relative to the bucket's
winner), the choices, and the profile with the best geometric-mean fwd+bwd over the buckets
against the chip's current table entry (`--best-file` writes its name, for the next benches).
--budget SECONDS stops starting new buckets when the time is spent (cut buckets are listed).
"""

from __future__ import annotations

import argparse
import math
import os
import pathlib
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slm_jax import tables  # noqa: E402
from slm_jax.benchtools import parser as make_parser, split_names  # noqa: E402
from slm_jax.kernels import launch_profiles  # noqa: E402

DEFAULT_BUCKETS = ("tg:2048,mix(causal,tg):2048,causal:2048,tg:8192,mix(causal,tg):8192,"
                   "mix(tg_nomask,tg):2048,tg:4096,causal:8192")


def parse_buckets(text: str) -> list[tuple[str, int]]:
  """`attention:T,...` → [(attention, T)] (mix(...) keeps its comma)."""
  buckets = []
  for part in split_names(text):
    attention, _, length = part.rpartition(":")
    if not attention or not length.isdigit():
      raise ValueError(f"bucket {part!r} is not attention:T")
    buckets.append((attention, int(length)))
  return buckets


def main() -> int:
  parser = make_parser(__doc__)
  parser.add_argument("--buckets", default=DEFAULT_BUCKETS)
  parser.add_argument("--tokens", type=int, default=16384, help="B·T of every bucket")
  parser.add_argument("--heads", type=int, default=16)
  parser.add_argument("--kv-heads", type=int, default=16)
  parser.add_argument("--head-dim", type=int, default=128)
  parser.add_argument("--dtype", default="bfloat16")
  parser.add_argument("--profiles", default=",".join(launch_profiles.CANDIDATES),
                      help="the candidates timed")
  parser.add_argument("--cache", default=None, help="autotune cache file (default: a new one)")
  parser.add_argument("--budget", type=float, default=0.0, help="seconds; 0: no limit")
  parser.add_argument("--best-file", default=None, help="write the best profile's name here")
  parser.add_argument("--interpret", action="store_true",
                      help="on CPU: the kernels under Triton's interpreter (correctness only)")
  args = parser.parse_args()
  try:
    buckets = parse_buckets(args.buckets)
  except ValueError as error:
    parser.error(str(error))
  profiles = tuple(p for p in args.profiles.split(",") if p)
  unknown = [p for p in profiles if p not in launch_profiles.PROFILES]
  if unknown or not profiles:
    parser.error(f"unknown profiles {unknown}; known: {', '.join(launch_profiles.PROFILES)}")
  if args.interpret:
    from slm_jax.kernels import triton_interpret  # pylint: disable=g-import-not-at-top
    wrapper = triton_interpret.import_wrapper()
  else:
    import importlib  # pylint: disable=g-import-not-at-top
    try:
      wrapper = importlib.import_module("slm_jax.kernels.triton_attention")
    except ImportError as error:
      print(f"no Triton kernel here ({error}); on CPU use --interpret")
      return 2
  import jax  # pylint: disable=g-import-not-at-top
  from slm_jax.kernels import autotune  # pylint: disable=g-import-not-at-top

  cache = args.cache or str(pathlib.Path(os.environ.get("OUT") or tempfile.mkdtemp())
                            / "triton_launch_cache.json")
  os.environ[autotune.ENV_CACHE] = cache
  chip = launch_profiles.current_chip()
  table = (launch_profiles.CHIP_PROFILES[chip].profile if chip in launch_profiles.CHIP_PROFILES
           else None)
  print(f"### Triton launch profiles on {chip} ({jax.devices()[0].device_kind}), {args.dtype}, "
        f"H={args.heads}, G={args.kv_heads}, head dim {args.head_dim}, B·T={args.tokens}; "
        f"synthetic lin2 rows; cache {cache}; kernel version {autotune.kernel_version()}; "
        f"table entry: {table or f'none (falls back to {launch_profiles.MEASURED_DEFAULT})'}\n")
  start, entries, cut = time.perf_counter(), {}, []
  for attention, length in buckets:
    if args.budget and time.perf_counter() - start > args.budget:
      cut.append(f"{attention}:{length}")
      continue
    bucket = launch_profiles.Bucket.of(attention, max(1, args.tokens // length), length,
                                       args.heads, args.kv_heads, args.head_dim, args.dtype)
    began = time.perf_counter()
    autotune.choose(bucket, chip, lambda one, b=bucket: wrapper.measure_launch(b, one), profiles)
    entries[bucket] = autotune.load(pathlib.Path(cache), chip, autotune.kernel_version()).get(
        bucket.key)
    print(f"timed {bucket.key}: {time.perf_counter() - began:.0f} s", flush=True)

  print("\n" + tables.header(["bucket", "B", *profiles, "chosen"]))
  for bucket, entry in entries.items():
    cells = []
    timings = (entry or {}).get("timings_ms", {})
    best = min((t[1] for t in timings.values() if t), default=None)
    for name in profiles:
      timing = timings.get(name)
      cells.append("–" if not timing else f"{timing[0]:.2f} / {timing[1]:.2f} "
                   f"({timing[1] / best:.2f}×)")
    print(tables.row([bucket.key, bucket.tokens // bucket.length, *cells,
                      (entry or {}).get("profile", "?")]))
  print("\ncells: fwd ms / fwd+bwd ms (fwd+bwd relative to the bucket's fastest)")

  autotune.forget()

  def never(launch):
    raise AssertionError(f"timed again although cached: {launch}")

  hits = sum(autotune.choose(bucket, chip, never, profiles) == entry["profile"]
             for bucket, entry in entries.items() if entry)
  print(f"second use (a new process): {hits} of {len(entries)} buckets answered by the cache, "
        "nothing timed")

  geomean = {}
  for name in profiles:
    ratios = []
    for entry in entries.values():
      timings = (entry or {}).get("timings_ms", {})
      best = min((t[1] for t in timings.values() if t), default=None)
      if timings.get(name) and best:
        ratios.append(timings[name][1] / best)
    if ratios and len(ratios) == len(entries):
      geomean[name] = math.exp(sum(map(math.log, ratios)) / len(ratios))
  if geomean:
    best_name = min(geomean, key=geomean.get)
    against = (f"; the table's `{table}`: {geomean[table]:.2f}×" if table in geomean else "")
    print(f"best over all buckets (geometric mean of fwd+bwd / fastest): `{best_name}` "
          f"{geomean[best_name]:.2f}×{against}")
    print("geometric means: " + ", ".join(f"{n} {g:.2f}×" for n, g in sorted(
        geomean.items(), key=lambda item: item[1])))
    if args.best_file:
      pathlib.Path(args.best_file).write_text(best_name + "\n")
  if cut:
    print(f"cut (budget {args.budget:.0f} s spent): {', '.join(cut)}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
