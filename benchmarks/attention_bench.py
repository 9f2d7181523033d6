"""Fused structural attention vs causal flash attention, and how many tiles the block plan skips.

  python benchmarks/attention_bench.py                     # CPU: --cpu-small (interpret mode)
  python benchmarks/attention_bench.py --lengths 2048,4096,8192   # GPU / TPU: speed

Rows are GUM documents in lin2, sentence-packed (`pack_documents`) at each length T, read from
../shared/data/gum/const with ptb.read_folder when present (else the embedded treebank); pass
--rows-cache FILE to save the packed rows once and reuse them where GUM is absent. Batch = --tokens
/ T rows, 16 heads, head dim 128 (defaults).

Timed (median of --repeats, compile excluded), forward and forward+backward (grads of q, k, v):
  causal          jax.nn.dot_product_attention(is_causal=True), the backend's best implementation
                  (cudnn on GPU when it accepts the inputs, else XLA's choice)
  every structural type (and causal with segments) with our fused kernel:
                  TPU: slm_jax.kernels.tpu_attention (Mosaic); GPU: triton_attention if importable;
                  CPU (--cpu-small): the Pallas kernel in interpret mode at small T (times are the
                  interpreter's, not meaningful), plus max |error| vs xla_attention
  --triton-launch (GPU): the Triton launch profile, `table` (default: the chip's entry of
                  kernels/launch_profiles.py), `autotune` (per shape bucket, timed at first use
                  and cached) or a profile name; the `profile` column says which each row used
                  (all profiles timed side by side: benchmarks/launch_profiles_bench.py)
  --xla-lengths 2048: also time xla_attention (the dense-mask reference, like the paper's
                  FlexAttention setup) per type at those lengths
Block-plan table (always, planner only, any backend): fraction of (query block, key block) tiles
that are empty (skipped), full (no predicate evaluated) and partial, for T = 2048, 4096, 8192.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slm_jax.kernels.block_plan import (EMPTY, FULL, pad_metadata, padded_length,  # noqa: E402
                                       plan_blocks)
from slm_jax.configurations import ATTENTIONS  # noqa: E402
from slm_jax.data.packing import pack_documents  # noqa: E402
from slm_jax.linearize import linearize  # noqa: E402
from slm_jax.model.attention import xla_attention  # noqa: E402
from slm_jax.structure import RowMetadata, dense_mask, parse_attention, row_metadata  # noqa: E402
from slm_jax import tables  # noqa: E402
from slm_jax.benchtools import median_of, parser as make_parser  # noqa: E402


def load_documents(gum: str | None):
  """GUM documents if the folder exists, else the embedded treebank; and the source's name."""
  if gum and pathlib.Path(gum).is_dir():
    from slm_jax import ptb  # pylint: disable=g-import-not-at-top
    return [trees for _, trees in ptb.read_folder(gum)], f"GUM ({gum})"
  from slm_jax.corpus.treebank import embedded_corpus  # pylint: disable=g-import-not-at-top
  return embedded_corpus("train", 400), "embedded treebank (GUM not found)"


class Rows:
  """Packed lin2 rows per length: kinds / segment [N, T] int32, loaded lazily, cached to npz."""

  def __init__(self, gum: str | None, cache: str | None):
    self.gum, self.cache = gum, cache
    self.source = None
    self._documents = None
    self._rows: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    if cache and pathlib.Path(cache).is_file():
      with np.load(cache, allow_pickle=False) as data:
        self.source = str(data["source"])
        for key in data.files:
          if key.startswith("kinds_"):
            T = int(key[6:])
            self._rows[T] = (data[key], data[f"segment_{T}"])

  def __call__(self, T: int) -> tuple[np.ndarray, np.ndarray]:
    if T not in self._rows:
      if self._documents is None:
        self._documents, self.source = load_documents(self.gum)
        self._sequences = [linearize(d, "lin2") for d in self._documents]
      rows, _ = pack_documents(self._sequences, T, "<pad>")
      self._rows[T] = (np.stack([r.kinds for r in rows]).astype(np.int32),
                       np.stack([r.segment for r in rows]).astype(np.int32))
    return self._rows[T]

  def save(self) -> None:
    if self.cache and self._rows:
      arrays = {f"kinds_{T}": k for T, (k, _) in self._rows.items()}
      arrays.update({f"segment_{T}": s for T, (_, s) in self._rows.items()})
      pathlib.Path(self.cache).parent.mkdir(parents=True, exist_ok=True)
      np.savez_compressed(self.cache, source=np.asarray(self.source), **arrays)


def tile_kinds(kinds, segment, attention: str, block_q: int, block_k: int, heads: int):
  """The plan's tile kinds [N, H, I, J] of packed rows (planner on the host, numpy) and meta."""
  T = kinds.shape[-1]
  meta = pad_metadata(row_metadata(kinds, segment), padded_length(T, block_q, block_k), xp=np)
  plan = plan_blocks(meta, parse_attention(attention).head_codes(heads), block_q, block_k, xp=np)
  return np.asarray(plan.kind_BHIJ), meta


def tile_fractions(kinds, segment, attention: str, block_q: int, block_k: int, heads: int):
  """(empty, full, partial) fractions of all tiles, over rows and heads."""
  kind, _ = tile_kinds(kinds, segment, attention, block_q, block_k, heads)
  empty, full = (kind == EMPTY).mean(), (kind == FULL).mean()
  return empty, full, 1.0 - empty - full


def oracle_empty(kinds, segment, attention: str, block_q: int, block_k: int):
  """(plan, dense oracle) empty-tile fractions of one row, per head group averaged."""
  spec = parse_attention(attention)
  kind, meta = tile_kinds(kinds, segment, attention, block_q, block_k, len(spec.groups))
  dense = dense_mask(meta, spec)  # [1, G, T, T]: the test oracle, affordable for one row
  _, G, T, _ = dense.shape
  true_empty = ~dense.reshape(1, G, T // block_q, block_q, T // block_k, block_k).any(axis=(3, 5))
  return (kind == EMPTY).mean(), true_empty.mean()


def plan_table(rows: Rows, lengths, block_q: int, block_k: int, heads: int, max_rows: int,
               oracle: bool):
  for T in lengths:
    rows(T)  # pack (or load) first, so the source is known
  print(f"\n### Block plan: tiles of {block_q}×{block_k}, lin2 rows of {rows.source}; "
        "empty = skipped, full = no predicate in-tile\n")
  extra = ["row 0: plan empty / dense-oracle empty"] if oracle else []
  print(tables.header(["T", "rows", "attention", "empty", "full", "partial",
                       "empty − causal's empty", *extra]))
  for T in lengths:
    kinds, segment = rows(T)
    kinds, segment = kinds[:max_rows], segment[:max_rows]
    causal_empty = None
    for attention in ATTENTIONS:
      empty, full, partial = tile_fractions(kinds, segment, attention, block_q, block_k, heads)
      causal_empty = empty if causal_empty is None else causal_empty
      check = []
      if oracle:
        plan_e, true_e = oracle_empty(kinds[:1], segment[:1], attention, block_q, block_k)
        check = [f"{plan_e:.1%} / {true_e:.1%}"]
      print(tables.row([T, len(kinds), attention, f"{empty:.1%}", f"{full:.1%}",
                        f"{partial:.1%}", f"{empty - causal_empty:+.1%}", *check]), flush=True)


def timed(fn, *args, repeats: int) -> float:
  """Median seconds of fn(*args) after one warm-up (compile) call."""
  return median_of(repeats, lambda: fn(*args))[0]


def forward_and_grad(attend):
  forward = jax.jit(attend)

  def loss(q, k, v, do):
    return jnp.sum(attend(q, k, v).astype(jnp.float32) * do)

  backward = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
  return forward, backward


def time_fwd_bwd(attend, q, k, v, do, repeats: int) -> tuple[float, float]:
  """Median seconds of attend's jitted forward and of its forward + backward (grads of q, k, v)."""
  fwd, bwd = forward_and_grad(attend)
  return timed(fwd, q, k, v, repeats=repeats), timed(bwd, q, k, v, do, repeats=repeats)


def bench_inputs(rows: "Rows", T: int, args, dtype, rng):
  """(kinds, segment, metadata, q, k, v, do) of the first --tokens / T packed rows of length T;
  q, k, v random in `dtype`, the cotangent do in float32."""
  kinds, segment = rows(T)
  B = max(1, min(len(kinds), args.tokens // T))
  kinds, segment = kinds[:B], segment[:B]
  meta = RowMetadata(*(jnp.asarray(x) for x in row_metadata(kinds, segment)))
  make = lambda *shape: jnp.asarray(rng.normal(size=shape), dtype)
  H, G, K = args.heads, args.kv_heads, args.head_dim
  q, k, v, do = make(B, T, H, K), make(B, T, G, K), make(B, T, G, K), make(B, T, H, K)
  return kinds, segment, meta, q, k, v, do.astype(jnp.float32)


def causal_baseline(backend: str, dtype):
  """jax.nn.dot_product_attention(causal) with the backend's best implementation, and its name."""
  if backend == "gpu":
    probe = jnp.zeros((1, 128, 2, 128), dtype)
    try:
      jax.block_until_ready(jax.nn.dot_product_attention(probe, probe, probe, is_causal=True,
                                                         implementation="cudnn"))
      impl = "cudnn"
    except Exception as error:  # pylint: disable=broad-except
      print(f"note: cudnn attention unavailable ({type(error).__name__}: {error}); using XLA's")
      impl = None
  else:
    impl = None
  fn = lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation=impl)
  return fn, f"dot_product_attention({impl or 'default'})"


def structural_kernel(backend: str, block_q: int, block_k: int, launch: str | None = None):
  """(fn(q, k, v, meta, spec), name) of our fused kernel on this backend, or (None, why).
  Pallas uses block_q × block_k; Triton the launch profile `launch` (None: the one
  SLM_TRITON_LAUNCH chooses per call: the chip's table entry, or autotuned)."""
  if backend == "tpu" or backend == "cpu":
    from slm_jax.kernels.tpu_attention import pallas_attention  # pylint: disable=g-import-not-at-top
    name = "pallas_tpu" + (" (interpret)" if backend == "cpu" else "")
    return (lambda q, k, v, m, s: pallas_attention(q, k, v, m, s, block_q=block_q,
                                                   block_k=block_k)), name
  try:
    from slm_jax.kernels.triton_attention import (  # pylint: disable=g-import-not-at-top
        triton_attention)
  except Exception as error:  # pylint: disable=broad-except  (ImportError without jax-triton)
    return None, f"triton_attention not importable ({type(error).__name__}: {error})"
  from slm_jax.kernels import launch_profiles  # pylint: disable=g-import-not-at-top
  shown = launch or f"SLM_TRITON_LAUNCH={launch_profiles.mode()}"
  return (lambda q, k, v, m, s: triton_attention(q, k, v, m, s, launch=launch)), (
      f"triton_gpu ({shown})")


def triton_profile(q, k, spec, launch: str | None):
  """(profile name, fwd tiles) the Triton wrapper uses for this call (autotune: timed now if
  the bucket is not cached)."""
  from slm_jax.kernels.triton_attention import resolve_launch  # pylint: disable=g-import-not-at-top
  name, chosen, _ = resolve_launch(q.shape, k.shape, q.dtype, spec, launch)
  return name, (chosen.fwd.block_q, chosen.fwd.block_k)


def speed_table(rows: Rows, lengths, args, backend: str):
  dtype = jnp.bfloat16 if backend != "cpu" else jnp.float32
  H, G, K = args.heads, args.kv_heads, args.head_dim
  baseline, baseline_name = causal_baseline(backend, dtype)
  launch = args.triton_launch if args.triton_launch not in ("table", "autotune") else None
  if args.triton_launch in ("table", "autotune"):
    os.environ["SLM_TRITON_LAUNCH"] = args.triton_launch
  blocks = (args.block_q, args.block_k)
  triton = False
  if backend == "gpu":
    try:
      importlib.import_module("slm_jax.kernels.triton_attention")
      triton = True
    except ImportError as error:
      print(f"note: no Triton kernel ({error})")
  kernel, kernel_name = structural_kernel(backend, *blocks, launch)
  if kernel is None:
    print(f"note: no structural kernel on {backend}: {kernel_name}")
  print(f"\n### Speed on {backend} ({jax.devices()[0].device_kind}), {jnp.dtype(dtype).name}, "
        f"H={H}, G={G}, head dim {K}; causal = {baseline_name}; structural = {kernel_name}; "
        + ("tiles per the profile column" if triton else f"blocks {blocks[0]}×{blocks[1]}")
        + "\n")
  check = backend == "cpu"
  errors_columns = ["max err fwd", "max err grads"] if check else []
  profile_column = ["profile"] if triton else []
  print(tables.header(["T", "B", "attention", *profile_column, "fwd ms", "fwd / causal",
                       "fwd+bwd ms", "fwd+bwd / causal", "empty tiles", *errors_columns]))
  no_errors = [None] * len(errors_columns)
  no_profile = [None] * len(profile_column)
  rng = np.random.default_rng(0)
  for T in lengths:
    kinds, segment, meta, q, k, v, do = bench_inputs(rows, T, args, dtype, rng)
    B = len(kinds)
    base_f, base_b = time_fwd_bwd(baseline, q, k, v, do, args.repeats)
    print(tables.row([T, B, "causal (baseline)", *no_profile, f"{base_f * 1e3:.2f}", "1.00",
                      f"{base_b * 1e3:.2f}", "1.00", None, *no_errors]))
    if kernel is None:
      continue
    for attention in ATTENTIONS:
      spec = parse_attention(attention)
      profile = []
      if triton:
        name, blocks = triton_profile(q, k, spec, launch)
        profile = [name]
      fwd, bwd = forward_and_grad(lambda q_, k_, v_: kernel(q_, k_, v_, meta, spec))
      t_f, t_b = timed(fwd, q, k, v, repeats=args.repeats), timed(bwd, q, k, v, do,
                                                                  repeats=args.repeats)
      empty, _, _ = tile_fractions(kinds, segment, attention, *blocks, H)
      errors = []
      if check:
        ref_f, ref_b = forward_and_grad(lambda q_, k_, v_: xla_attention(q_, k_, v_, meta, spec))
        err_f = float(jnp.abs(fwd(q, k, v) - ref_f(q, k, v)).max())
        err_b = max(float(jnp.abs(a - b).max()) for a, b in zip(bwd(q, k, v, do),
                                                                ref_b(q, k, v, do)))
        errors = [f"{err_f:.1e}", f"{err_b:.1e}"]
      print(tables.row([T, B, attention, *profile, f"{t_f * 1e3:.2f}", f"{t_f / base_f:.2f}",
                        f"{t_b * 1e3:.2f}", f"{t_b / base_b:.2f}", f"{empty:.1%}", *errors]),
            flush=True)
      if T in args.xla_lengths:  # the dense-mask reference, as the paper's FlexAttention setup
        t_f, t_b = time_fwd_bwd(lambda q_, k_, v_: xla_attention(q_, k_, v_, meta, spec),
                                q, k, v, do, args.repeats)
        print(tables.row([T, B, f"{attention} (xla_attention, dense mask)", *no_profile,
                          f"{t_f * 1e3:.2f}",
                          f"{t_f / base_f:.2f}", f"{t_b * 1e3:.2f}", f"{t_b / base_b:.2f}", None,
                          *no_errors]), flush=True)


def main() -> int:
  parser = make_parser(__doc__)
  from slm_jax.cli import shared_data_dir  # pylint: disable=g-import-not-at-top
  shared = shared_data_dir()
  backend = jax.default_backend()
  parser.add_argument("--gum", default=str(shared / "gum" / "const") if shared else None)
  parser.add_argument("--rows-cache", default=None,
                      help="npz of packed rows: loaded if present, else written after packing")
  parser.add_argument("--cpu-small", action=argparse.BooleanOptionalAction,
                      default=backend == "cpu",
                      help="interpret-mode kernel at --small-length (default on CPU)")
  parser.add_argument("--small-length", type=int, default=256)
  parser.add_argument("--lengths", default="2048,4096,8192")
  parser.add_argument("--tokens", type=int, default=16384, help="tokens per batch (B = tokens/T)")
  parser.add_argument("--heads", type=int, default=16)
  parser.add_argument("--kv-heads", type=int, default=16)
  parser.add_argument("--head-dim", type=int, default=128)
  parser.add_argument("--block-q", type=int, default=128)
  parser.add_argument("--block-k", type=int, default=128)
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--plan-rows", type=int, default=64,
                      help="rows per length in the block-plan table")
  parser.add_argument("--xla-lengths", default="",
                      help="lengths at which to also time xla_attention (dense mask) per type")
  parser.add_argument("--triton-launch", default="table",
                      help="GPU: table (the chip's profile), autotune (per bucket, cached: "
                      "kernels/autotune.py) or a profile name of kernels/launch_profiles.py")
  parser.add_argument("--skip-speed", action="store_true", help="block-plan table only")
  parser.add_argument("--oracle", action=argparse.BooleanOptionalAction, default=True,
                      help="check row 0's empty fraction against the dense mask (test oracle)")
  args = parser.parse_args()
  lengths = [int(x) for x in args.lengths.split(",") if x]
  args.xla_lengths = {int(x) for x in args.xla_lengths.split(",") if x}

  rows = Rows(args.gum, args.rows_cache)
  plan_table(rows, lengths, args.block_q, args.block_k, args.heads, args.plan_rows, args.oracle)
  if not args.skip_speed:
    if args.cpu_small:
      small = argparse.Namespace(**{**vars(args), "tokens": 2 * args.small_length,
                                    "repeats": min(args.repeats, 2)})
      speed_table(rows, [args.small_length], small, backend)
    else:
      speed_table(rows, lengths, args, backend)
  rows.save()
  return 0


if __name__ == "__main__":
  sys.exit(main())
