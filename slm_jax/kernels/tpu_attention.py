"""Fused structural flash attention for TPU (Pallas / Mosaic) (attention_impl "pallas_tpu").

`pallas_attention` has the semantics of `slm_jax.model.attention.xla_attention`: per-head SPEC §3
masks (codes from `AttentionSpec.head_codes(H)`, hybrids in one launch), GQA (head h reads KV head
h // (H/G)), scale 1/sqrt(head_dim), float32 softmax statistics and accumulation for bf16 inputs.

Design (forward and the two backward kernels share it):
- `block_plan.plan_groups` classifies every (query block, key block) tile per distinct attention
  code on device from O(T) block summaries, and lists each query block's non-empty key blocks
  (and each key block's non-empty query blocks for dK/dV).
- Grid (B, H, I, J): the last axis walks the list; step kk < count fetches key block
  kblocks[kk] (scalar-prefetched plan, `PrefetchScalarGridSpec`, so the block index is data
  dependent), steps beyond the count repeat the last block (no new DMA) and do nothing.
- In a partial tile the mask is `structure.attends` itself, evaluated on the tile's metadata
  (query segment/kind/pop [bq, 1] against key segment/kind/pop [1, bk], row indices as 2-D
  iotas) with the head's code read from scalar memory; full tiles skip the predicate.
- Forward: online softmax (running max m, denominator l, fp32 accumulator), saves logsumexp.
  Backward: P recomputed from the logsumexp; dQ iterates key blocks (plan), dK/dV iterate query
  blocks (transposed plan) per query head, then GQA groups are summed.
Rows are padded to a multiple of the block sizes with padding tokens (segment 0).

Interpreter or Mosaic is chosen from the target compiled for (`kernels.target`: the devices of
the mesh in force, else the default backend), not from the host: a TPU target — a TPU, or a TPU
topology's devices that libtpu describes on a CPU host (`kernels.mosaic_compile`, `slm_jax.aot`)
— lowers through Mosaic; a CPU target (tests, benchmarks) runs the Pallas interpreter. Under a
mesh of several devices the rows are split over it by a shard_map. The plan lives in scalar
memory (SMEM): flattened to 1-D, kept per distinct code (not per head), and a batch whose plan
exceeds `SMEM_PLAN_ENTRIES` words is processed in chunks of rows.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl

from slm_jax.kernels import block_plan, target
from slm_jax.kernels.block_plan import FULL
from slm_jax.structure import AttentionSpec, RowMetadata, TokenMeta, attends

# Mosaic TPU APIs (importable on any backend): the scalar-prefetch grid spec and VMEM scratch
# also drive interpret mode on CPU; TPU compiler parameters are passed only when compiling.
from jax.experimental.pallas import tpu as pltpu  # noqa: E402  pylint: disable=g-import-not-at-top

MASK_VALUE = -0.7 * float(np.finfo(np.float32).max)  # finite: exp(MASK - m) never NaN
# Largest plan (B·C·I·J int32 entries, 128 KiB) kept in scalar memory by one launch; larger
# batches run in row chunks. An assumption about SMEM capacity, not yet measured on a TPU.
SMEM_PLAN_ENTRIES = 1 << 15
BLOCK_Q = BLOCK_K = 128  # default tile sizes
# Scoped VMEM limit per kernel ("forward", "dq", "dkv") in bytes; absent: the compiler's default.
VMEM_LIMIT_BYTES: dict[str, int] = {}


@dataclasses.dataclass(frozen=True)
class _Config:
  """Static launch parameters (hashable: a custom_vjp nondiff argument)."""

  block_q: int
  block_k: int
  num_codes: int  # C: distinct attention codes (plan groups)
  kv_repeat: int  # R = H / G
  scale: float
  interpret: bool
  # The attention code of every head when there is one (a trace-time constant, so the tile mask
  # reduces to that type's expression); -1 for hybrids (read per head from scalar memory).
  static_code: int = -1


# --- tile math shared by the three kernels --------------------------------------------------------


def _head_code(cfg: _Config, codes_ref, h):
  """The code of head h: the static one if all heads share it, else from scalar memory."""
  return cfg.static_code if cfg.static_code >= 0 else codes_ref[h]


def _tile_mask(code, q0, qmeta_ref, k0, kmeta_ref):
  """`attends` on one tile: query metadata [bq, 1] vs key metadata [1, bk] -> bool [bq, bk].
  A Python int `code` is passed through as is (folded at trace time)."""
  shape = (qmeta_ref.shape[1], kmeta_ref.shape[2])
  q_index = q0 + jax.lax.broadcasted_iota(jnp.int32, shape, 0)  # 2-D iotas (TPU-friendly)
  k_index = k0 + jax.lax.broadcasted_iota(jnp.int32, shape, 1)
  query = TokenMeta(q_index, qmeta_ref[0], qmeta_ref[1], qmeta_ref[2])
  key = TokenMeta(k_index, kmeta_ref[0], kmeta_ref[1], kmeta_ref[2])
  return attends(query, key, code if isinstance(code, int) else jnp.full((1, 1), code, jnp.int32))


def _logits(q, k, scale):
  """q [bq, K] · k [bk, K]^T in float32, scaled."""
  s = jax.lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
  return s * scale


def _plan_entry(b, h, i, step, group_ref, count_ref, visit_ref, cfg: _Config, rows: int,
                cols: int):
  """(count, block index, tile kind) of list `step` of row `i` for batch b, head h.

  The flat plan is [B, C, rows, cols]; entries pack block index · 4 + tile kind.
  """
  row = (b * cfg.num_codes + group_ref[h]) * rows + i
  entry = visit_ref[row * cols + step]
  return count_ref[row], entry >> 2, entry & 3


# --- forward --------------------------------------------------------------------------------------


def _forward_kernel(codes_ref, group_ref, count_ref, visit_ref,  # scalar prefetch
                    q_ref, k_ref, v_ref, qmeta_ref, kmeta_ref,  # inputs
                    o_ref, lse_ref,  # outputs
                    m_scr, l_scr, acc_scr, *, cfg: _Config, num_q: int, num_k: int):
  b, h, i, step = (pl.program_id(a) for a in range(4))
  count, kb, kind = _plan_entry(b, h, i, step, group_ref, count_ref, visit_ref, cfg, num_q, num_k)

  @pl.when(step == 0)
  def _init():
    m_scr[...] = jnp.full_like(m_scr, MASK_VALUE)
    l_scr[...] = jnp.zeros_like(l_scr)
    acc_scr[...] = jnp.zeros_like(acc_scr)

  def tile(masked: bool):
    v = v_ref[...]
    s = _logits(q_ref[...], k_ref[...], cfg.scale)
    if masked:
      mask = _tile_mask(_head_code(cfg, codes_ref, h), i * cfg.block_q, qmeta_ref,
                        kb * cfg.block_k, kmeta_ref)
      s = jnp.where(mask, s, MASK_VALUE)
    m_prev = m_scr[...]
    m_next = jnp.maximum(m_prev, jnp.max(s, axis=1, keepdims=True))
    p = jnp.exp(s - m_next)
    if masked:  # a fully masked row has m_next == MASK_VALUE and exp(0) == 1: zero it exactly
      p = jnp.where(mask, p, 0.0)
    alpha = jnp.exp(m_prev - m_next)
    l_scr[...] = alpha * l_scr[...] + jnp.sum(p, axis=1, keepdims=True)
    acc_scr[...] = alpha * acc_scr[...] + jax.lax.dot(p.astype(v.dtype), v,
                                                     preferred_element_type=jnp.float32)
    m_scr[...] = m_next

  run = step < count
  pl.when(run & (kind == FULL))(lambda: tile(False))
  pl.when(run & (kind != FULL))(lambda: tile(True))

  @pl.when(step == num_k - 1)
  def _finish():
    l = l_scr[...]
    seen = l > 0.0  # always true (every token attends itself); guarded anyway
    o_ref[...] = (acc_scr[...] / jnp.where(seen, l, 1.0)).astype(o_ref.dtype)
    lse_ref[...] = jnp.where(seen, m_scr[...] + jnp.log(jnp.where(seen, l, 1.0)), -MASK_VALUE)


class _Specs(NamedTuple):
  q: Any  # width -> BlockSpec of a [B, H, T, width] query-side operand
  kv: Any  # BlockSpec of k / v [B, G, T, K]
  qmeta: Any  # BlockSpec of query metadata [B, 3, T, 1]
  kmeta: Any  # BlockSpec of key metadata [B, 3, 1, T]
  k_out: Any  # width -> BlockSpec of a per-query-head key-side output [B, H, T, width]


def _specs(cfg: _Config, K: int, num_outer: int, num_inner: int, transposed: bool) -> _Specs:
  """BlockSpecs for grid (b, h, outer, step); index maps get the scalar-prefetched
  (codes, group, count, visit) after the grid indices.

  Forward and dQ: outer = query block, the key block is the plan's entry `step` of that query
  block. dK/dV (transposed): outer = key block, the query block comes from the transposed plan.
  """
  bq, bk, C, R = cfg.block_q, cfg.block_k, cfg.num_codes, cfg.kv_repeat

  def listed(b, h, outer, step, codes, group, count, visit):
    del codes, count
    row = (b * C + group[h]) * num_outer + outer
    return visit[row * num_inner + step] >> 2

  own = lambda b, h, outer, *_: outer
  q_block, k_block = (listed, own) if transposed else (own, listed)
  return _Specs(
      q=lambda width: pl.BlockSpec((None, None, bq, width),
                                   lambda b, h, o, s, *p: (b, h, q_block(b, h, o, s, *p), 0)),
      kv=pl.BlockSpec((None, None, bk, K),
                      lambda b, h, o, s, *p: (b, h // R, k_block(b, h, o, s, *p), 0)),
      qmeta=pl.BlockSpec((None, 3, bq, 1),
                         lambda b, h, o, s, *p: (b, 0, q_block(b, h, o, s, *p), 0)),
      kmeta=pl.BlockSpec((None, 3, 1, bk),
                         lambda b, h, o, s, *p: (b, 0, 0, k_block(b, h, o, s, *p))),
      k_out=lambda width: pl.BlockSpec((None, None, bk, width),
                                       lambda b, h, o, s, *p: (b, h, k_block(b, h, o, s, *p), 0)))


def _compiler_params(cfg: _Config, name: str):
  if cfg.interpret:
    return None
  return pltpu.CompilerParams(
      dimension_semantics=("parallel", "parallel", "parallel", "arbitrary"),
      vmem_limit_bytes=VMEM_LIMIT_BYTES.get(name))


_MATMULS = {"forward": 2, "dq": 3, "dkv": 4}  # [bq, bk, K] matmuls per visited tile


def _cost(cfg: _Config, name: str, args, out_shape) -> pl.CostEstimate:
  """What XLA's cost analysis counts for one launch (it cannot look inside a Mosaic call): the
  matmuls and exps of every tile at or below the diagonal — an upper bound, the plan skips
  more — and the bytes of the operands and results."""
  B, H, T, K = args[4].shape  # q
  bq, bk = cfg.block_q, cfg.block_k
  tiles = sum(min(T // bk, ((i + 1) * bq - 1) // bk + 1) for i in range(T // bq))
  size = lambda x: int(np.prod(x.shape)) * jnp.dtype(x.dtype).itemsize
  return pl.CostEstimate(flops=B * H * tiles * _MATMULS[name] * 2 * bq * bk * K,
                         transcendentals=B * H * tiles * bq * bk,
                         bytes_accessed=sum(size(x) for x in jax.tree.leaves((args, out_shape))))


def _call(kernel, cfg: _Config, grid, in_specs, out_specs, out_shape, scratch, args):
  name = kernel.func.__name__.strip("_").removesuffix("_kernel")  # forward, dq, dkv
  return pl.pallas_call(
      kernel,
      grid_spec=pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=4, grid=grid, in_specs=in_specs,
                                             out_specs=out_specs, scratch_shapes=scratch),
      out_shape=out_shape, compiler_params=_compiler_params(cfg, name), interpret=cfg.interpret,
      name=f"structural_attention_{name}", cost_estimate=_cost(cfg, name, args, out_shape),
  )(*args)


def _forward(cfg: _Config, q, k, v, qmeta, kmeta, codes, group, plan):
  """q [B, H, T, K], k/v [B, G, T, K] -> (o [B, H, T, K], lse [B, H, T, 1] float32)."""
  B, H, T, K = q.shape
  I, J = T // cfg.block_q, T // cfg.block_k
  count, visit = plan[0], plan[1]
  spec = _specs(cfg, K, I, J, transposed=False)
  kernel = functools.partial(_forward_kernel, cfg=cfg, num_q=I, num_k=J)
  return _call(
      kernel, cfg, (B, H, I, J),
      [spec.q(K), spec.kv, spec.kv, spec.qmeta, spec.kmeta],
      [spec.q(K), spec.q(1)],
      [jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct((B, H, T, 1), jnp.float32)],
      [pltpu.VMEM((cfg.block_q, 1), jnp.float32), pltpu.VMEM((cfg.block_q, 1), jnp.float32),
       pltpu.VMEM((cfg.block_q, K), jnp.float32)],
      (codes, group, count, visit, q, k, v, qmeta, kmeta))


# --- backward -------------------------------------------------------------------------------------


def _probs(cfg: _Config, code, q, k, lse, masked, q0, qmeta_ref, k0, kmeta_ref):
  """P = exp(QK^T·scale − lse) of one tile, exactly 0 where the predicate is False."""
  p = jnp.exp(_logits(q, k, cfg.scale) - lse)
  if masked:
    p = jnp.where(_tile_mask(code, q0, qmeta_ref, k0, kmeta_ref), p, 0.0)
  return p


def _dq_kernel(codes_ref, group_ref, count_ref, visit_ref,
               q_ref, k_ref, v_ref, qmeta_ref, kmeta_ref, lse_ref, delta_ref, do_ref,
               dq_ref, dq_scr, *, cfg: _Config, num_q: int, num_k: int):
  b, h, i, step = (pl.program_id(a) for a in range(4))
  count, kb, kind = _plan_entry(b, h, i, step, group_ref, count_ref, visit_ref, cfg, num_q, num_k)

  @pl.when(step == 0)
  def _init():
    dq_scr[...] = jnp.zeros_like(dq_scr)

  def tile(masked: bool):
    k, do = k_ref[...], do_ref[...]
    p = _probs(cfg, _head_code(cfg, codes_ref, h), q_ref[...], k, lse_ref[...], masked,
               i * cfg.block_q, qmeta_ref, kb * cfg.block_k, kmeta_ref)
    dp = jax.lax.dot_general(do, v_ref[...], (((1,), (1,)), ((), ())),
                             preferred_element_type=jnp.float32)
    ds = p * (dp - delta_ref[...])
    dq_scr[...] += jax.lax.dot(ds.astype(k.dtype), k, preferred_element_type=jnp.float32)

  run = step < count
  pl.when(run & (kind == FULL))(lambda: tile(False))
  pl.when(run & (kind != FULL))(lambda: tile(True))

  @pl.when(step == num_k - 1)
  def _finish():
    dq_ref[...] = (dq_scr[...] * cfg.scale).astype(dq_ref.dtype)


def _dkv_kernel(codes_ref, group_ref, count_ref, visit_ref,
                q_ref, k_ref, v_ref, qmeta_ref, kmeta_ref, lse_ref, delta_ref, do_ref,
                dk_ref, dv_ref, dk_scr, dv_scr, *, cfg: _Config, num_q: int, num_k: int):
  b, h, j, step = (pl.program_id(a) for a in range(4))
  count, qb, kind = _plan_entry(b, h, j, step, group_ref, count_ref, visit_ref, cfg, num_k, num_q)

  @pl.when(step == 0)
  def _init():
    dk_scr[...] = jnp.zeros_like(dk_scr)
    dv_scr[...] = jnp.zeros_like(dv_scr)

  def tile(masked: bool):
    q, do = q_ref[...], do_ref[...]
    p = _probs(cfg, _head_code(cfg, codes_ref, h), q, k_ref[...], lse_ref[...], masked,
               qb * cfg.block_q, qmeta_ref, j * cfg.block_k, kmeta_ref)
    dv_scr[...] += jax.lax.dot(p.T.astype(do.dtype), do, preferred_element_type=jnp.float32)
    dp = jax.lax.dot_general(do, v_ref[...], (((1,), (1,)), ((), ())),
                             preferred_element_type=jnp.float32)
    ds = p * (dp - delta_ref[...])
    dk_scr[...] += jax.lax.dot(ds.T.astype(q.dtype), q, preferred_element_type=jnp.float32)

  run = step < count
  pl.when(run & (kind == FULL))(lambda: tile(False))
  pl.when(run & (kind != FULL))(lambda: tile(True))

  @pl.when(step == num_q - 1)
  def _finish():
    dk_ref[...] = (dk_scr[...] * cfg.scale).astype(dk_ref.dtype)
    dv_ref[...] = dv_scr[...].astype(dv_ref.dtype)


def _backward(cfg: _Config, q, k, v, qmeta, kmeta, codes, group, plan, o, lse, do):
  B, H, T, K = q.shape
  G = k.shape[1]
  I, J = T // cfg.block_q, T // cfg.block_k
  count, visit, qcount, qvisit = plan
  delta = jnp.sum(o.astype(jnp.float32) * do.astype(jnp.float32), axis=-1, keepdims=True)
  do = do.astype(q.dtype)
  operands = (q, k, v, qmeta, kmeta, lse, delta, do)

  spec = _specs(cfg, K, I, J, transposed=False)
  in_specs = [spec.q(K), spec.kv, spec.kv, spec.qmeta, spec.kmeta, spec.q(1), spec.q(1),
              spec.q(K)]
  dq = _call(functools.partial(_dq_kernel, cfg=cfg, num_q=I, num_k=J), cfg, (B, H, I, J),
             in_specs, spec.q(K), jax.ShapeDtypeStruct(q.shape, q.dtype),
             [pltpu.VMEM((cfg.block_q, K), jnp.float32)],
             (codes, group, count, visit) + operands)

  spec = _specs(cfg, K, J, I, transposed=True)
  in_specs = [spec.q(K), spec.kv, spec.kv, spec.qmeta, spec.kmeta, spec.q(1), spec.q(1),
              spec.q(K)]
  # Per query head; in float32 to be summed over a GQA group, else already k's dtype.
  per_head = jax.ShapeDtypeStruct((B, H, T, K), jnp.float32 if H != G else k.dtype)
  dk, dv = _call(functools.partial(_dkv_kernel, cfg=cfg, num_q=I, num_k=J), cfg, (B, H, J, I),
                 in_specs,
                 [spec.k_out(K), spec.k_out(K)], [per_head, per_head],
                 [pltpu.VMEM((cfg.block_k, K), jnp.float32),
                  pltpu.VMEM((cfg.block_k, K), jnp.float32)],
                 (codes, group, qcount, qvisit) + operands)
  # GQA: query heads h = g·R + r share KV head g.
  dk = dk.reshape(B, G, H // G, T, K).sum(axis=2).astype(k.dtype)
  dv = dv.reshape(B, G, H // G, T, K).sum(axis=2).astype(v.dtype)
  return dq, dk, dv


# --- custom VJP and the public function -----------------------------------------------------------


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _fused(cfg: _Config, q, k, v, aux):
  return _forward(cfg, q, k, v, *aux)[0]


def _fused_fwd(cfg: _Config, q, k, v, aux):
  o, lse = _forward(cfg, q, k, v, *aux)
  return o, (q, k, v, aux, o, lse)


def _fused_bwd(cfg: _Config, residuals, do):
  q, k, v, aux, o, lse = residuals
  dq, dk, dv = _backward(cfg, q, k, v, *aux, o, lse, do)
  return dq, dk, dv, jax.tree.map(lambda _: None, aux)


_fused.defvjp(_fused_fwd, _fused_bwd)


def _flat_plan(plan: block_plan.BlockPlan, J: int, I: int):
  """SMEM layout: 1-D int32 counts and lists with entries block index · 4 + tile kind."""
  kind_T = jnp.swapaxes(plan.kind_BHIJ, -1, -2).astype(jnp.int32)  # [B, C, J, I]
  kinds = plan.kind_BHIJ.astype(jnp.int32)
  visit = plan.kblocks_BHIJ * 4 + jnp.take_along_axis(kinds, plan.kblocks_BHIJ, axis=-1)
  qvisit = plan.qblocks_BHJI * 4 + jnp.take_along_axis(kind_T, plan.qblocks_BHJI, axis=-1)
  flat = lambda x: x.reshape(-1).astype(jnp.int32)
  return flat(plan.count_BHI), flat(visit), flat(plan.qcount_BHJ), flat(qvisit)


def _block_sizes(T: int, block_q: int, block_k: int) -> tuple[int, int, int]:
  """Blocks no larger than the (power-of-two rounded) row; the padded row length."""
  cap = max(8, pl.next_power_of_2(T))
  bq, bk = min(block_q, cap), min(block_k, cap)
  return bq, bk, block_plan.padded_length(T, bq, bk)


def pallas_attention(q_BTHK: jax.Array, k_BSGK: jax.Array, v_BSGK: jax.Array, meta: RowMetadata,
                     attention: AttentionSpec, *, block_q: int = BLOCK_Q, block_k: int = BLOCK_K,
                     interpret: bool | None = None) -> jax.Array:
  """Fused structural attention with the semantics of `xla_attention` (differentiable).

  interpret: run the Pallas interpreter. Default: from the target compiled for
  (`kernels.target.platform`: the devices of the mesh in force, else JAX's default backend) —
  Mosaic for a TPU target (also a TPU topology's devices on a CPU host), the interpreter on CPU.
  """
  return attention_with_codes(q_BTHK, k_BSGK, v_BSGK, meta,
                              attention.head_codes(q_BTHK.shape[2]), block_q=block_q,
                              block_k=block_k, interpret=interpret)


def uses_mosaic(interpret: bool | None = None) -> bool:
  """Whether a call traced here lowers through Mosaic (False: the Pallas interpreter).

  Explicit `interpret` wins; otherwise a TPU target gets Mosaic and a CPU target the interpreter.
  Mosaic for any other target is an error naming the target and what to pass instead.
  """
  platform = target.platform()
  mosaic = platform == "tpu" if interpret is None else not interpret
  if mosaic and platform != "tpu":
    raise ValueError(f"pallas_attention compiles with Mosaic for TPU only (the target is "
                     f"{platform}: {target.device_kind()}); pass interpret=True, put a TPU "
                     "topology's mesh in force (kernels.target.use_mesh), or use "
                     "attention_impl='triton_gpu' / 'xla'")
  return mosaic


def attention_with_codes(q_BTHK: jax.Array, k_BSGK: jax.Array, v_BSGK: jax.Array,
                         meta: RowMetadata, codes_H, *, block_q: int = BLOCK_Q,
                         block_k: int = BLOCK_K, interpret: bool | None = None) -> jax.Array:
  """`pallas_attention` with any concrete attention code per head ([H] ints), in one launch.

  Under a mesh of several devices the rows are split over its (non-manual) axes by a shard_map
  (each chip runs the kernel on its own rows); a Mosaic call is not partitioned by XLA.
  """
  B, T, H, K = q_BTHK.shape
  S, G = k_BSGK.shape[1], k_BSGK.shape[2]
  if S != T or meta.kind.shape[-1] != T:
    raise ValueError(f"pallas_attention is self-attention over packed rows: q has T={T}, k/v "
                     f"S={S}, metadata {meta.kind.shape[-1]} tokens")
  if H % G:
    raise ValueError(f"pallas_attention: {H} query heads are not a multiple of {G} KV heads")
  codes_C, group_H = block_plan.distinct_codes(codes_H)
  if group_H.shape != (H,):
    raise ValueError(f"attention_with_codes: {group_H.shape[0]} head codes for {H} heads")
  bq, bk, Tp = _block_sizes(T, block_q, block_k)
  cfg = _Config(bq, bk, len(codes_C), H // G, float(K) ** -0.5, not uses_mosaic(interpret),
                int(codes_C[0]) if len(codes_C) == 1 else -1)
  local = functools.partial(_attend_rows, cfg, codes_C, group_H, Tp)
  meta = RowMetadata(*(jnp.asarray(x) for x in meta))
  axes = _row_axes(B)
  if axes:
    rows = jax.sharding.PartitionSpec(axes)
    local = jax.shard_map(local, in_specs=(rows,) * 4, out_specs=rows, axis_names=set(axes),
                          check_vma=False)
  return local(q_BTHK, k_BSGK, v_BSGK, meta)


def _row_axes(B: int) -> tuple[str, ...]:
  """The mesh axes to split B rows over: every non-manual axis of the mesh in force when it has
  more than one device and they divide B; () to run unsplit (one device, or B not divisible)."""
  mesh = target.abstract_mesh()
  if mesh is None:
    return ()
  manual = set(mesh.manual_axes)
  axes = tuple(a for a in mesh.axis_names if a not in manual)
  size = int(np.prod([mesh.shape[a] for a in axes])) if axes else 1
  return axes if size > 1 and B % size == 0 else ()


def _attend_rows(cfg: _Config, codes_C, group_H, Tp: int, q_BTHK, k_BSGK, v_BSGK,
                 meta: RowMetadata):
  """The kernel on rows (one device's share under a shard_map)."""
  B, T, H, K = q_BTHK.shape
  bq, bk = cfg.block_q, cfg.block_k
  meta = block_plan.pad_metadata(meta, Tp)
  pad = lambda x: jnp.pad(x, ((0, 0), (0, Tp - T), (0, 0), (0, 0))).swapaxes(1, 2)
  q, k, v = pad(q_BTHK), pad(k_BSGK), pad(v_BSGK)  # [B, H|G, Tp, K]
  fields = jnp.stack([meta.segment, meta.kind, meta.pop], axis=1).astype(jnp.int32)  # [B, 3, Tp]
  qmeta, kmeta = fields[..., :, None], fields[..., None, :]
  plan = _flat_plan(block_plan.plan_groups(meta, codes_C, bq, bk, jnp), Tp // bk, Tp // bq)
  codes = jnp.asarray(np.asarray(codes_C, np.int32)[group_H])
  group = jnp.asarray(group_H)

  rows = rows_per_launch(B, plan_words_per_row(Tp, len(codes_C), bq, bk))
  if rows == B:
    o = _fused(cfg, q, k, v, (qmeta, kmeta, codes, group, plan))
  else:  # plan too large for one launch's scalar memory: chunks of `rows` rows
    chunk = lambda x: x.reshape(B // rows, rows, *x.shape[1:])
    planned = tuple(x.reshape(B // rows, -1) for x in plan)  # flat plans are batch-major

    def one(args):
      q_, k_, v_, qm_, km_, plan_ = args
      return _fused(cfg, q_, k_, v_, (qm_, km_, codes, group, plan_))

    o = jax.lax.map(one, (chunk(q), chunk(k), chunk(v), chunk(qmeta), chunk(kmeta), planned))
    o = o.reshape(B, H, Tp, K)
  return o.swapaxes(1, 2)[:, :T]


def plan_words_per_row(T: int, num_codes: int, block_q: int = BLOCK_Q,
                       block_k: int = BLOCK_K) -> int:
  """int32 words of one row's plan in the launch that holds the most: a forward / dQ launch
  holds C·I counts and C·I·J list entries, a dK/dV launch C·J counts and C·J·I entries."""
  bq, bk, Tp = _block_sizes(T, block_q, block_k)
  I, J = Tp // bq, Tp // bk
  return num_codes * (I * J + max(I, J))


def rows_per_launch(B: int, words_per_row: int) -> int:
  """Largest divisor of B whose plan fits `SMEM_PLAN_ENTRIES` words (at least 1 row)."""
  best = 1
  for rows in range(1, B + 1):
    if B % rows == 0 and rows * words_per_row <= SMEM_PLAN_ENTRIES:
      best = rows
  return best
