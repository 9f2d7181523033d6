"""Every Triton launch profile compiled for CUDA GPUs on this (GPU-less) machine: registers,
spills and shared memory per kernel, from Triton's own compiler and the ptxas / cuobjdump /
nvdisasm its wheel ships (`triton_kernels.compile_for_gpu`).

  python benchmarks/triton_aot.py                          # every profile, sm_80 and sm_90
  python benchmarks/triton_aot.py --profiles old,lean --archs 90 --head-dims 128

For each profile (`slm_jax.kernels.launch_profiles.PROFILES`), target (sm_80 = A100, sm_90 =
H100/H200), head dim (64: the 100M model, 128: 500M/1B) and attention (`tg`: one type, the mask
folded into the kernel as a constexpr; `hybrid`: per-head codes read at run time), bfloat16:
registers per thread, local-memory stores in the SASS (register spills) and the stack frame they
use, dynamic shared memory per block against the target's limit (a launch over it fails on that
GPU). Speed is not measured here: `benchmarks/launch_profiles_bench.py` on a GPU.
"""

from __future__ import annotations

import os
import pathlib
import sys
import time

os.environ["TRITON_INTERPRET"] = "0"  # the real compiler (before triton_kernels is imported)
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slm_jax import tables  # noqa: E402
from slm_jax.benchtools import parser as make_parser  # noqa: E402
from slm_jax.kernels.launch_profiles import PROFILES  # noqa: E402

# Shared memory a block may use (opt-in maximum), bytes: CUDA C Programming Guide, table
# "Technical Specifications per Compute Capability".
SHARED_LIMIT = {80: 163 * 1024, 86: 99 * 1024, 89: 99 * 1024, 90: 227 * 1024}
CODES = {"tg": 1, "hybrid": -1}  # structure.Attention.TG; -1: per-head codes
KERNEL_NAMES = {"attention_fwd_kernel": "fwd", "attention_bwd_dq_kernel": "dq",
                "attention_bwd_dkdv_kernel": "dkdv"}
HEADERS = ["profile", "sm", "head dim", "attention", "kernel", "tiles", "registers",
           "spill stores", "stack B", "shared KiB", "fits"]


def rows_of(profile: str, arch: int, head_dim: int, attention: str) -> list[list]:
  """The table rows of one compile (three kernels); raises on a compile error."""
  from slm_jax.kernels import triton_kernels  # pylint: disable=g-import-not-at-top
  launch = PROFILES[profile]
  compiled = triton_kernels.compile_for_gpu(arch, "bfloat16", head_dim, code=CODES[attention],
                                            launch=launch)
  rows = []
  for (name, result), one in zip(compiled.items(), launch):
    limit = SHARED_LIMIT.get(arch)
    fits = "?" if limit is None else ("yes" if result.shared_bytes <= limit else "NO")
    tiles = (f"{one.block_q}×{one.block_k} w{one.num_warps} s{one.num_stages}"
             + (" full-loop" if one.full_tiles else ""))
    rows.append([profile, arch, head_dim, attention, KERNEL_NAMES[name], tiles, result.registers,
                 result.spill_stores, result.stack_bytes, f"{result.shared_bytes / 1024:.1f}",
                 fits])
  return rows


def main() -> int:
  parser = make_parser(__doc__)
  parser.add_argument("--profiles", default=",".join(PROFILES))
  parser.add_argument("--archs", default="80,90")
  parser.add_argument("--head-dims", default="64,128")
  parser.add_argument("--attentions", default="tg,hybrid", help=f"of {', '.join(CODES)}")
  args = parser.parse_args()
  profiles = [p for p in args.profiles.split(",") if p]
  unknown = [p for p in profiles if p not in PROFILES]
  attentions = [a for a in args.attentions.split(",") if a]
  if unknown or any(a not in CODES for a in attentions):
    parser.error(f"unknown profile or attention: {', '.join(unknown + attentions)} (profiles: "
                 f"{', '.join(PROFILES)}; attentions: {', '.join(CODES)})")
  import triton  # pylint: disable=g-import-not-at-top
  print(f"### Triton {triton.__version__} launch profiles compiled without a GPU, bfloat16\n")
  print(tables.header(HEADERS), flush=True)
  start, failures = time.perf_counter(), 0
  for arch in (int(a) for a in args.archs.split(",")):
    for head_dim in (int(d) for d in args.head_dims.split(",")):
      for attention in attentions:
        for profile in profiles:
          try:
            for row in rows_of(profile, arch, head_dim, attention):
              print(tables.row(row), flush=True)
          except Exception as error:  # pylint: disable=broad-except  (one failed compile)
            failures += 1
            message = str(error).strip().splitlines()[-1][:100] if str(error).strip() else ""
            print(tables.row([profile, arch, head_dim, attention, "all", None,
                              f"compile failed: {type(error).__name__}: {message}", None, None,
                              None, None]), flush=True)
  print(f"\n{failures} failed compiles; {time.perf_counter() - start:.0f} s")
  return 1 if failures else 0


if __name__ == "__main__":
  sys.exit(main())
