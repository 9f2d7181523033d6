"""Does the fused attention kernel of this backend agree with the XLA reference? Run it first on a
new GPU/TPU machine (a speed table of a wrong kernel means nothing).

  python benchmarks/kernel_check.py                 # auto: triton_gpu on GPU, pallas_tpu on TPU
  python benchmarks/kernel_check.py --impl pallas_tpu   # on CPU: the Pallas kernel, interpreted
  python benchmarks/kernel_check.py --interpret --launch old_split   # on CPU: the Triton kernels
      under Triton's interpreter (jax-triton replaced by `kernels.triton_interpret`; needs the
      triton-test extra), with one launch profile (`--launch all`: each profile in turn)

Rows: embedded-treebank documents in lin2, sentence-packed at --length (several documents per
row, continued documents, padding in the last row). For every attention type and both hybrids,
GQA with G = --kv-heads, float32 and bfloat16: max |kernel - xla_attention| of the output and of
the gradients of q, k, v (a random cotangent). Tolerances as in the CPU kernel tests: float32
1e-5 absolute... on an accelerator float32 matmuls may run in TF32, so float32 is judged at 2e-2;
bfloat16 1e-2 (output) / 2e-2 (gradients) times max(1, max |reference|). Prints a table; exit
status 1 if any row fails, 2 if no fused kernel is available on this backend.
"""

from __future__ import annotations

import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slm_jax.configurations import ATTENTIONS  # noqa: E402
from slm_jax.corpus.treebank import generate_documents  # noqa: E402
from slm_jax.data.packing import pack_documents, stack_rows  # noqa: E402
from slm_jax.linearize import linearize  # noqa: E402
from slm_jax.model import attention as attention_module  # noqa: E402
from slm_jax.structure import RowMetadata, parse_attention, row_metadata  # noqa: E402
from slm_jax import tables  # noqa: E402
from slm_jax.benchtools import parser as make_parser, split_names  # noqa: E402

# (output, gradients); float32 on an accelerator allows TF32 matmuls (XLA's default precision).
TOLERANCE = {"float32": (2e-2, 2e-2), "bfloat16": (1e-2, 2e-2)}
CPU_FLOAT32_TOLERANCE = (1e-5, 1e-5)


def packed_rows(length: int, rows: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
  """kinds and segment [rows, length] of lin2 treebank documents; the last row ends in padding."""
  documents = generate_documents(rows * length // 20 + 4, seed=seed, min_sentences=1,
                                 max_sentences=2)  # short documents: several per row
  sequences = (linearize(d, "lin2") for d in documents)
  packed, _ = pack_documents(sequences, length, pad_token="<pad>", token_dtype=object)
  stacked = stack_rows(packed[:rows])
  kinds, segment = stacked.kinds.copy(), stacked.segment.copy()
  cut = length - length // 5
  kinds[-1, cut:], segment[-1, cut:] = 0, 0  # padding (kind PAD, segment 0)
  return kinds, segment


def check(impl: str, length: int, rows: int, heads: int, kv_heads: int, head_dim: int,
          block_q: int | None = None, block_k: int | None = None,
          launch: str | None = None, attentions=ATTENTIONS,
          dtypes=("float32", "bfloat16")) -> bool:
  """Prints the table; True if every case is within tolerance. Blocks default to the kernel's own
  (for Triton the launch profile training uses on this chip); `launch` names a Triton profile."""
  kernel = attention_module.ATTENTION_KERNELS[impl]
  kinds, segment = packed_rows(length, rows)
  meta = RowMetadata(*(jnp.asarray(x) for x in row_metadata(kinds, segment)))
  documents = len({(r, s) for r, row in enumerate(segment) for s in set(row.tolist()) if s})
  print(f"### {impl} on {jax.default_backend()} ({jax.devices()[0].device_kind}): {rows} rows × "
        f"T={length} ({documents} document pieces, padding in the last row), H={heads}, "
        f"G={kv_heads}, head dim {head_dim}, blocks "
        f"{'the kernel default' if block_q is None else f'{block_q}×{block_k}'}"
        f"{f', launch profile {launch}' if launch else ''}\n")
  print(tables.header(["attention", "dtype", "max err o", "max err dq, dk, dv",
                       "tolerance (o, grads)", "ok"]))
  rng = np.random.default_rng(0)
  shapes = [(rows, length, heads, head_dim), (rows, length, kv_heads, head_dim),
            (rows, length, kv_heads, head_dim)]
  q32, k32, v32 = (rng.normal(size=s).astype(np.float32) for s in shapes)
  do = jnp.asarray(rng.normal(size=shapes[0]).astype(np.float32))
  all_ok = True
  for dtype in dtypes:
    q, k, v = (jnp.asarray(x, dtype) for x in (q32, k32, v32))
    tolerance = (CPU_FLOAT32_TOLERANCE if dtype == "float32" and jax.default_backend() == "cpu"
                 else TOLERANCE[dtype])
    for name in attentions:
      spec = parse_attention(name)

      def run(fn):
        o, vjp = jax.vjp(lambda q_, k_, v_: fn(q_, k_, v_, meta, spec), q, k, v)
        grads = vjp(do.astype(o.dtype))
        return [np.asarray(x, np.float32) for x in (o, *grads)]

      options = {} if block_q is None else dict(block_q=block_q, block_k=block_k)
      options.update({} if launch is None else dict(launch=launch))
      call = lambda q_, k_, v_, m, s: kernel(q_, k_, v_, m, s, **options)
      got, want = run(call), run(attention_module.xla_attention)
      scale = 1.0 if dtype == "float32" else max(1.0, max(float(np.abs(w).max()) for w in want))
      err_o = float(np.abs(got[0] - want[0]).max())
      err_g = max(float(np.abs(g - w).max()) for g, w in zip(got[1:], want[1:]))
      finite = all(np.isfinite(g).all() for g in got)
      ok = finite and err_o <= tolerance[0] * scale and err_g <= tolerance[1] * scale
      all_ok &= ok
      print(tables.row([name, dtype, f"{err_o:.2e}", f"{err_g:.2e}",
                        f"{tolerance[0] * scale:.1e}, {tolerance[1] * scale:.1e}",
                        "yes" if ok else "NO" + ("" if finite else " (nan)")]), flush=True)
  return all_ok


def main() -> int:
  parser = make_parser(__doc__)
  parser.add_argument("--impl", default="auto",
                      help="auto (this backend's fused kernel), triton_gpu or pallas_tpu")
  parser.add_argument("--length", type=int, default=512)
  parser.add_argument("--rows", type=int, default=2)
  parser.add_argument("--heads", type=int, default=4)
  parser.add_argument("--kv-heads", type=int, default=2)
  parser.add_argument("--head-dim", type=int, default=64)
  parser.add_argument("--block-q", type=int, default=None, help="default: the kernel's own")
  parser.add_argument("--block-k", type=int, default=None)
  parser.add_argument("--attentions", default=",".join(ATTENTIONS),
                      help="comma-separated attention types (default: all)")
  parser.add_argument("--dtypes", default="float32,bfloat16")
  parser.add_argument("--interpret", action="store_true",
                      help="triton_gpu under Triton's interpreter on this CPU (correctness only)")
  parser.add_argument("--launch", default=None,
                      help="triton_gpu: a launch profile of kernels.launch_profiles, or 'all'")
  args = parser.parse_args()
  if args.interpret:
    from slm_jax.kernels import triton_interpret  # pylint: disable=g-import-not-at-top
    wrapper = triton_interpret.import_wrapper()
    attention_module.register_attention_kernel("triton_gpu", wrapper.triton_attention)
    args.impl = "triton_gpu"
  try:
    impl = attention_module.resolve_attention_impl(args.impl)
  except Exception as error:  # pylint: disable=broad-except  (KernelNotRegisteredError, bad name)
    print(f"no fused kernel: {error}")
    return 2
  if impl == "xla":
    errors = getattr(attention_module, "_IMPORT_ERRORS", {})
    print(f"no fused kernel on {jax.default_backend()} (attention_impl={args.impl} resolves to "
          f"xla){': ' + str(errors) if errors else ''}")
    return 2
  from slm_jax.kernels.launch_profiles import PROFILES  # pylint: disable=g-import-not-at-top
  if args.launch and impl != "triton_gpu":
    parser.error(f"--launch is for triton_gpu, not {impl}")
  if args.launch not in (None, "all", *PROFILES):
    parser.error(f"--launch {args.launch} is not a profile ({', '.join(PROFILES)}, all)")
  launches = list(PROFILES) if args.launch == "all" else [args.launch]
  attentions = [a for a in ATTENTIONS if a in split_names(args.attentions)]
  dtypes = [d for d in ("float32", "bfloat16") if d in args.dtypes.split(",")]
  if not attentions or not dtypes:
    parser.error(f"--attentions / --dtypes select nothing (attentions: {', '.join(ATTENTIONS)})")
  failed = []
  for launch in launches:
    if not check(impl, args.length, args.rows, args.heads, args.kv_heads, args.head_dim,
                 args.block_q, args.block_k, launch, attentions, dtypes):
      failed.append(launch or "default")
    print()
  print(f"{'FAIL' if failed else 'PASS'}: {impl} vs xla_attention"
        + (f" (failed: {', '.join(failed)})" if failed else ""))
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
