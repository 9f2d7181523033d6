"""Fused structural attention on GPUs: the Triton kernels of `triton_kernels`, launched from JAX
with jax-triton (attention_impl "triton_gpu", found by the model's kernel table).

Needs the `gpu` extra (jax-triton and a CUDA/ROCm jaxlib): without jax_triton (or with a CPU
jaxlib, where jax_triton refuses to import) this import raises ImportError, which the model's
kernel seam (`resolve_attention_impl`) catches and reports. Works with jax-triton 0.3.x
(`out_shape=`, Python 3.11) and 0.4.x (`out_type=`, Python >= 3.12).

`triton_attention` has `xla_attention`'s signature and semantics (SPEC §3 masks from O(T)
metadata, per-head codes of hybrids, segments, padding attends only itself, GQA head h reads KV
head h // (H/G), scale 1/sqrt(head_dim), float32 softmax and accumulation) and a `jax.custom_vjp`:
the forward saves o and the row log-sum-exp; the backward runs the dq kernel (grid B·H × query
blocks) and the dk/dv kernel (grid B·G × key blocks, summing the H/G heads of a KV head in
registers). Each kernel visits only the non-empty tiles of `block_plan.plan_blocks`, in the order
of `triton_plan.visit_lists` (full tiles first; a kernel launched with `full_tiles` skips their
mask). Each kernel tiles its own way (`TritonLaunch`; one plan per distinct tiling), chosen per
call by `resolve_launch` (the chip's launch profile, a named one, or the autotuned one:
`launch_profiles`, `autotune`), and a configuration with one attention type passes it as the CODE
constexpr, so the in-tile mask compiles to that type alone.
"""

from __future__ import annotations

import functools
import inspect
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp

# Triton 3.7 defined TMA_TF32 (the tf32 code of tensor-descriptor arguments). jax-triton 0.4.x
# imports it inside the try block that loads its NVIDIA backend, so with Triton 3.6 (PyTorch 2.11's
# pin, on many GPU images) that block fails and every launch later dies on a stub. Our kernels pass
# no tensor descriptors; give the constant Triton 3.7's value when it is missing.
_TRITON_37_TMA_TF32 = 11


def _define_missing_tma_tf32() -> bool:
  """Sets triton.backends.nvidia.driver.TMA_TF32 if that module lacks it; True if it did."""
  try:
    from triton.backends.nvidia import driver  # pylint: disable=g-import-not-at-top
  except Exception:  # pylint: disable=broad-except  (no Triton or no NVIDIA backend: nothing to do)
    return False
  if hasattr(driver, "TMA_TF32"):
    return False
  driver.TMA_TF32 = _TRITON_37_TMA_TF32
  return True


if _define_missing_tma_tf32():
  import logging  # pylint: disable=g-import-not-at-top
  logging.getLogger(__name__).info("Triton < 3.7: defined triton.backends.nvidia.driver.TMA_TF32 "
                                   "for jax-triton 0.4")

try:
  import jax_triton as jt  # pylint: disable=g-import-not-at-top
except ImportError:
  raise  # no `gpu` extra, or a CPU jaxlib: the kernel seam reports it
except Exception as error:  # pylint: disable=broad-except
  raise ImportError(f"jax_triton failed to import: {type(error).__name__}: {error}") from error
import triton  # pylint: disable=g-import-not-at-top

from slm_jax.kernels import launch_profiles
from slm_jax.kernels import triton_kernels as tk
from slm_jax.kernels import autotune
from slm_jax.kernels.autotune import Timing
from slm_jax.kernels.block_plan import pad_metadata, padded_length, plan_blocks
from slm_jax.kernels.launch_profiles import Bucket, KernelLaunch, TritonLaunch
from slm_jax.kernels.synthetic_rows import lin2_metadata
from slm_jax.kernels.triton_plan import visit_lists
from slm_jax.structure import AttentionSpec, RowMetadata, parse_attention

# jax-triton renamed `out_shape` to `out_type` (the old name is deprecated, then gone).
_OUT_KEYWORD = ("out_type" if "out_type" in inspect.signature(jt.triton_call).parameters
                else "out_shape")


class _Static(NamedTuple):
  """Hashable static arguments of the custom_vjp: each kernel's launch (blocks shrunk to the row),
  the padded length every plan covers, and the attention code of all heads (-1: per head)."""

  fwd: KernelLaunch
  dq: KernelLaunch
  dkdv: KernelLaunch
  length: int
  code: int


def _call(kernel, args, out, grid, launch: KernelLaunch, **constexprs):
  return jt.triton_call(*args, kernel=kernel, grid=grid, num_warps=launch.num_warps,
                        num_stages=launch.num_stages, **{_OUT_KEYWORD: out}, **constexprs)


def _constexprs(q_BTHK, k_BSGK, launch: KernelLaunch, static: _Static) -> dict:
  _, T, H, K = q_BTHK.shape
  return dict(T=T, H=H, G=k_BSGK.shape[2], BLOCK_Q=launch.block_q, BLOCK_K=launch.block_k,
              NQ=static.length // launch.block_q, NK=static.length // launch.block_k,
              CODE=static.code, FULL_TILES=launch.full_tiles,
              **tk.launch_config(jnp.dtype(q_BTHK.dtype).name, K))


def _forward(q_BTHK, k_BSGK, v_BSGK, aux, static: _Static):
  segment, kind, pop, codes, lists = aux
  count, full, kblocks = lists["fwd"]
  B, T, H, _ = q_BTHK.shape
  out = (jax.ShapeDtypeStruct(q_BTHK.shape, q_BTHK.dtype),
         jax.ShapeDtypeStruct((B, H, T), jnp.float32))
  grid = (B * H, static.length // static.fwd.block_q)
  o_BTHK, lse_BHT = _call(tk.attention_fwd_kernel,
                          (q_BTHK, k_BSGK, v_BSGK, segment, kind, pop, codes, count, full,
                           kblocks),
                          out, grid, static.fwd, **_constexprs(q_BTHK, k_BSGK, static.fwd, static))
  return o_BTHK, lse_BHT


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _fused(q_BTHK, k_BSGK, v_BSGK, aux, static: _Static):
  return _forward(q_BTHK, k_BSGK, v_BSGK, aux, static)[0]


def _fused_fwd(q_BTHK, k_BSGK, v_BSGK, aux, static: _Static):
  o_BTHK, lse_BHT = _forward(q_BTHK, k_BSGK, v_BSGK, aux, static)
  return o_BTHK, (q_BTHK, k_BSGK, v_BSGK, aux, o_BTHK, lse_BHT)


def _fused_bwd(static: _Static, residuals, do_BTHK):
  q_BTHK, k_BSGK, v_BSGK, aux, o_BTHK, lse_BHT = residuals
  segment, kind, pop, codes, lists = aux
  B, T, H, _ = q_BTHK.shape
  G = k_BSGK.shape[2]
  do_BTHK = do_BTHK.astype(q_BTHK.dtype)
  delta_BHT = jnp.einsum("bthd,bthd->bht", do_BTHK.astype(jnp.float32),
                         o_BTHK.astype(jnp.float32))
  count, full, kblocks = lists["dq"]
  dq_BTHK = _call(tk.attention_bwd_dq_kernel,
                  (q_BTHK, k_BSGK, v_BSGK, do_BTHK, lse_BHT, delta_BHT, segment, kind, pop, codes,
                   count, full, kblocks),
                  jax.ShapeDtypeStruct(q_BTHK.shape, q_BTHK.dtype),
                  (B * H, static.length // static.dq.block_q), static.dq,
                  **_constexprs(q_BTHK, k_BSGK, static.dq, static))
  qcount, qfull, qblocks = lists["dkdv"]
  dk_BSGK, dv_BSGK = _call(tk.attention_bwd_dkdv_kernel,
                           (q_BTHK, k_BSGK, v_BSGK, do_BTHK, lse_BHT, delta_BHT, segment, kind,
                            pop, codes, qcount, qfull, qblocks),
                           (jax.ShapeDtypeStruct(k_BSGK.shape, k_BSGK.dtype),
                            jax.ShapeDtypeStruct(v_BSGK.shape, v_BSGK.dtype)),
                           (B * G, static.length // static.dkdv.block_k), static.dkdv,
                           **_constexprs(q_BTHK, k_BSGK, static.dkdv, static))
  return dq_BTHK, dk_BSGK, dv_BSGK, None  # integer metadata and visit lists: no cotangent


_fused.defvjp(_fused_fwd, _fused_bwd)


def _block(requested: int, length: int, name: str) -> int:
  """The block size used: `requested` (a power of two ≥ 16), shrunk for short rows."""
  if requested < 16 or requested & (requested - 1):
    raise ValueError(f"triton_attention: {name} must be a power of two >= 16, got {requested}")
  return min(requested, max(16, triton.next_power_of_2(length)))


def _seconds(fn, *args, repeats: int) -> float:
  """Median wall seconds of fn(*args) after one warm-up (compile) call."""
  jax.block_until_ready(fn(*args))
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - start)
  return sorted(times)[len(times) // 2]


def measure_launch(bucket: Bucket, launch: TritonLaunch, repeats: int = 3) -> Timing:
  """Forward and forward+backward milliseconds of `launch` on the bucket's shapes: B·T tokens of
  synthetic packed lin2 rows (`synthetic_rows`), random q, k, v. Runs eagerly even when called
  while a step is being traced (the autotuner's first use inside training)."""
  batch = max(1, bucket.tokens // bucket.length)
  spec = parse_attention(bucket.attention)
  with jax.ensure_compile_time_eval():
    meta = RowMetadata(*(jnp.asarray(x) for x in lin2_metadata(batch, bucket.length)))
    keys = jax.random.split(jax.random.key(0), 4)
    shapes = [(batch, bucket.length, heads, bucket.head_dim)
              for heads in (bucket.heads, bucket.kv_heads, bucket.kv_heads, bucket.heads)]
    q, k, v, do = (jax.random.normal(key, shape, bucket.dtype) for key, shape in zip(keys, shapes))
    attend = lambda q_, k_, v_: triton_attention(q_, k_, v_, meta, spec, launch=launch)
    loss = lambda q_, k_, v_: jnp.sum(attend(q_, k_, v_).astype(jnp.float32)
                                      * do.astype(jnp.float32))
    fwd = _seconds(jax.jit(attend), q, k, v, repeats=repeats)
    fwd_bwd = _seconds(jax.jit(jax.grad(loss, argnums=(0, 1, 2))), q, k, v, repeats=repeats)
  return Timing(fwd * 1e3, fwd_bwd * 1e3)


def resolve_launch(q_shape, k_shape, dtype, attention: AttentionSpec,
                   launch: TritonLaunch | str | None = None) -> tuple[str, TritonLaunch, str]:
  """(profile name, launch, how chosen) of a call: `launch` itself ("given"), a profile name, or
  None: `autotune.resolve` under SLM_TRITON_LAUNCH (table / autotune / a name)."""
  if isinstance(launch, TritonLaunch):
    return "given", launch, "given"
  chip = launch_profiles.current_chip()
  if isinstance(launch, str):
    name = launch_profiles.named_profile(launch, chip)
    return name, launch_profiles.PROFILES[name], f"launch={launch}"
  B, T, H, K = q_shape
  bucket = Bucket.of(attention.name, B, T, H, k_shape[2], K, jnp.dtype(dtype).name)
  name, how = autotune.resolve(bucket, lambda one: measure_launch(bucket, one), chip)
  return name, launch_profiles.PROFILES[name], how


def triton_attention(q_BTHK: jax.Array, k_BSGK: jax.Array, v_BSGK: jax.Array, meta: RowMetadata,
                     attention: AttentionSpec, *, block_q: int | None = None,
                     block_k: int | None = None, num_warps: int | None = None,
                     num_stages: int | None = None,
                     launch: TritonLaunch | str | None = None) -> jax.Array:
  """Fused `xla_attention`: o_BTHK from q [B,T,H,K], k/v [B,T,G,K] and the row metadata.

  `launch` sets each kernel's tiles and launch: a `TritonLaunch`, a profile name of
  `launch_profiles.PROFILES`, or None (`resolve_launch`: the chip's table profile, or the
  autotuned one under SLM_TRITON_LAUNCH=autotune); `block_q`, `block_k`, `num_warps`,
  `num_stages`, when given, set those of all three kernels instead.
  """
  B, T, H, K = q_BTHK.shape
  G = k_BSGK.shape[2]
  if k_BSGK.shape != (B, T, G, K) or v_BSGK.shape != k_BSGK.shape:
    raise ValueError(f"triton_attention: self-attention needs k and v of shape {(B, T, G, K)} "
                     f"(q {q_BTHK.shape}), got k {k_BSGK.shape}, v {v_BSGK.shape}")
  if H % G:
    raise ValueError(f"triton_attention: {H} query heads are not a multiple of {G} KV heads")
  if K > 256:
    raise ValueError(f"triton_attention: head_dim {K} > 256 is not supported")
  if not q_BTHK.dtype == k_BSGK.dtype == v_BSGK.dtype:
    raise ValueError(f"triton_attention: q, k, v dtypes differ: {q_BTHK.dtype}, "
                     f"{k_BSGK.dtype}, {v_BSGK.dtype}")
  _, launch, _ = resolve_launch(q_BTHK.shape, k_BSGK.shape, q_BTHK.dtype, attention, launch)
  if (block_q, block_k, num_warps, num_stages) != (None,) * 4:
    launch = TritonLaunch(*(one._replace(
        block_q=block_q or one.block_q, block_k=block_k or one.block_k,
        num_warps=num_warps or one.num_warps, num_stages=num_stages or one.num_stages)
                            for one in launch))
  launch = TritonLaunch(*(one._replace(block_q=_block(one.block_q, T, "block_q"),
                                       block_k=_block(one.block_k, T, "block_k"))
                          for one in launch))
  length = padded_length(T, max(one.block_q for one in launch),
                         max(one.block_k for one in launch))
  codes_H = attention.head_codes(H)  # concrete: plan_blocks specializes on the distinct codes
  code = int(codes_H[0]) if (codes_H == codes_H[0]).all() else -1  # one type: a constexpr
  # Plans of rows padded to a multiple of every block; the kernels read the unpadded metadata
  # and mask rows >= T (the padded rows' plan only adds tiles, never hides a real pair, and
  # marks no tile with padding full).
  padded = pad_metadata(meta, length)
  by_blocks: dict[tuple[int, int], object] = {}
  lists = {}
  for name, one in zip(TritonLaunch._fields, launch):
    blocks = (one.block_q, one.block_k)
    if blocks not in by_blocks:
      kind = plan_blocks(padded, codes_H, *blocks).kind_BHIJ
      expected = (B, H, length // blocks[0], length // blocks[1])
      if tuple(kind.shape) != expected:
        raise ValueError(f"triton_attention: plan_blocks returned tile kinds of shape "
                         f"{tuple(kind.shape)}, expected {expected}")
      by_blocks[blocks] = visit_lists(kind)
    plan = by_blocks[blocks]
    lists[name] = ((plan.qcount_BHJ, plan.qfull_BHJ, plan.qblocks_BHJI) if name == "dkdv"
                   else (plan.count_BHI, plan.full_BHI, plan.kblocks_BHIJ))
  i32 = lambda x: jnp.asarray(x).astype(jnp.int32)
  aux = (i32(meta.segment), i32(meta.kind), i32(meta.pop), i32(codes_H), lists)
  return _fused(q_BTHK, k_BSGK, v_BSGK, aux, _Static(*launch, length=length, code=code))
