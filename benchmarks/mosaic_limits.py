"""The fused TPU attention kernel's scalar (SMEM) and vector (VMEM) memory limits, measured by the
real TPU compiler (libtpu, no chip needed) for each chip generation.

  python benchmarks/mosaic_limits.py --libtpu=/path/to/libtpu.so            # every generation
  python benchmarks/mosaic_limits.py --generations v5e,v6e --blocks 128,512

Every row is forward + backward of `attention_with_codes` compiled for one device of a TPU
topology (`slm_jax.kernels.mosaic_compile`), so the numbers are the compiler's, not estimates:
- SMEM: one launch holding a plan of ½, 1, 2, 4 and 8 × `tpu_attention.SMEM_PLAN_ENTRIES` int32
  words (one head, T = 2048, 128-blocks: 272 words a row; row chunking off), what the compiler
  accepts or the SMEM it says it lacks, and the largest plan that compiles (bisection over rows).
- VMEM: for each square block size, dtype and head dim, the smallest scoped VMEM limit (one for
  the three kernels) at which forward + backward compile (`mosaic_compile.vmem_need`: raised to
  what each refusal asks for, then bisected), and whether the case compiles at the compiler's
  default scoped limit (a refusal names the limit).
- The largest square block per generation and dtype that compiles at the default limit.
The defaults `tpu_attention.SMEM_PLAN_ENTRIES` and `BLOCK_Q` / `BLOCK_K` are chosen from these
tables (docs/MOSAIC_LIMITS.md has the measured ones). Slow on 2 cores (minutes per generation).
"""

from __future__ import annotations

import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slm_jax import aot, cli  # noqa: E402
from slm_jax.benchtools import parser as make_parser, table  # noqa: E402
from slm_jax.kernels import mosaic_compile as mc, tpu_attention  # noqa: E402

GENERATIONS = {"v4": "v4-8", "v5e": "v5e-8", "v5p": "v5p-8", "v6e": "v6e-8"}  # aot.TOPOLOGIES
MIB = 1 << 20


def _mib(value: int | None) -> str:
  return "–" if value is None else f"{value / MIB:.2f}"


def _vmem_capacity(devices) -> int:
  """The chip's VMEM per core as JAX's Mosaic tables give it (the ceiling of the probes)."""
  from jax._src.pallas.mosaic import tpu_info  # pylint: disable=g-import-not-at-top
  from slm_jax.kernels import target  # pylint: disable=g-import-not-at-top
  with target.use_mesh(mc.one_axis_mesh(devices)):
    return tpu_info.get_tpu_info().vmem_capacity_bytes


def smem_rows(name: str, devices) -> list[list[str]]:
  budget = tpu_attention.SMEM_PLAN_ENTRIES
  cells, fits, too_big, capacity = [], None, None, None
  for factor in FACTORS:
    result = mc.compile_one_launch(mc.plan_case(int(budget * factor)), devices)
    words = result.case.B * tpu_attention.plan_words_per_row(result.case.T, 1)
    refused = mc.smem_oom(result)
    if result.ok:
      cells.append("yes")
      fits = words
    elif refused:
      used, capacity = refused
      cells.append(f"no: {_mib(used)} used" if used else "no")
      too_big = too_big or words
    else:
      cells.append(f"error: {result.error[:60]}")
  largest = (mc.largest_plan(devices, fits, too_big) if fits and too_big else None)
  kind = result.device_kind
  return [[name, kind, _mib(capacity), *cells,
           "–" if largest is None else f"{largest} ({largest * 4 / 1024:.0f} KiB)"]]


def vmem_rows(name: str, devices, blocks, dtypes, head_dims) -> tuple[list, dict]:
  ceiling = _vmem_capacity(devices)
  rows, largest = [], {}
  for dtype in dtypes:
    for K in head_dims:
      for block in blocks:
        case = mc.AttentionCase(1, 2 * block, 1, 1, K, dtype, (1,), block, block)
        default = mc.compile_attention(case, devices)
        oom = mc.vmem_oom(default)
        need = mc.vmem_need(case, devices, ceiling)
        verdict = "yes" if default.ok else (
            f"no: asks {_mib(oom[0])} of {_mib(oom[1])}" if oom else f"error: {default.error[:50]}")
        if default.ok:
          largest[(dtype, K)] = max(largest.get((dtype, K), 0), block)
        rows.append([name, dtype, K, f"{block}×{block}", _mib(need), verdict])
        print(f"{name} {dtype} K={K} block {block}: {_mib(need)} {verdict}", file=sys.stderr,
              flush=True)
  return rows, largest


def main(argv: list[str] | None = None) -> int:
  parser = make_parser(__doc__)
  parser.add_argument("--libtpu", help="path of libtpu.so (default: the installed libtpu)")
  parser.add_argument("--generations", default=",".join(GENERATIONS),
                      help=f"comma-separated, of {', '.join(GENERATIONS)}")
  parser.add_argument("--blocks", default="128,256,512,1024,2048")
  parser.add_argument("--dtypes", default="bfloat16,float32")
  parser.add_argument("--head_dims", default="128")
  parser.add_argument("--skip_smem", action="store_true")
  args = parser.parse_args(argv)
  names = args.generations.split(",")
  unknown = [n for n in names if n not in GENERATIONS]
  if unknown:
    raise cli.CliError(f"--generations: unknown {unknown[0]!r}; expected {', '.join(GENERATIONS)}")
  blocks = [int(b) for b in args.blocks.split(",")]
  dtypes, head_dims = args.dtypes.split(","), [int(k) for k in args.head_dims.split(",")]
  smem, vmem, largest_rows = [], [], []
  started = time.time()
  for name in names:
    devices = aot.tpu_devices(GENERATIONS[name], args.libtpu)[:1]
    if not args.skip_smem:
      smem += smem_rows(name, devices)
      print(table(SMEM_HEADERS, smem[-1:]), file=sys.stderr, flush=True)
    rows, largest = vmem_rows(name, devices, blocks, dtypes, head_dims)
    vmem += rows
    largest_rows += [[name, dtype, K, f"{block}×{block}"] for (dtype, K), block in largest.items()]
  budget = tpu_attention.SMEM_PLAN_ENTRIES
  if smem:
    print(f"## SMEM: one launch's plan (SMEM_PLAN_ENTRIES = {budget} words)\n")
    print(table(SMEM_HEADERS, smem) + "\n")
  print("## VMEM: the scoped limit forward + backward need (MiB; – more than the chip has), "
        "one head\n")
  print(table(["gen", "dtype", "K", "block", "scoped VMEM needed",
               "compiles at the default limit"], vmem) + "\n")
  print("## Largest square block compiling at the default scoped VMEM limit\n")
  print(table(["gen", "dtype", "K", "block"], largest_rows))
  print(f"\n({time.time() - started:.0f} s)")
  return cli.EXIT_OK


FACTORS = (0.5, 1, 2, 4, 8)  # × SMEM_PLAN_ENTRIES
SMEM_HEADERS = ["gen", "device kind", "SMEM MiB",
                *(f"{f:g}× = {int(f * tpu_attention.SMEM_PLAN_ENTRIES)} words" for f in FACTORS),
                "largest plan, words"]

if __name__ == "__main__":
  sys.exit(cli.run(main))
