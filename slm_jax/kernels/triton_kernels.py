"""Triton kernel bodies of the fused structural attention (SPEC §3): forward, backward dq, dk/dv.

Importable with only `triton` installed (no jax_triton, no GPU): `slm_jax.kernels.triton_attention`
launches them from JAX through jax-triton, and the tests launch them with torch CPU tensors under
Triton's interpreter (`TRITON_INTERPRET=1`, set before this module is imported).

Layouts (contiguous, row-major): q [B, T, H, K], k and v [B, T, G, K] (K = HEAD_DIM, padded to
BLOCK_DIM in tiles; head h reads KV head h // (H/G)), o / dq like q, dk / dv like k; metadata
segment, kind, pop [B, T] int32 (the row index is the token's index); codes [H] int32
(`structure.Attention` code of every head); lse (log2 units: log2 Σ exp2(scale · log2 e · s))
and delta [B, H, T] float32. Visit lists (`slm_jax.kernels.triton_plan`, from the block plan of
`slm_jax.kernels.block_plan`): count and full [B, H, NQ] and kblocks [B, H, NQ, NK] (the first
count entries are the non-empty key blocks of a query block, its `full` full tiles first), qcount,
qfull [B, H, NK] and qblocks [B, H, NK, NQ] (the transposed lists); NQ·BLOCK_Q and NK·BLOCK_K may
exceed T (a plan of padded rows). Rows need not be a multiple of the blocks: out-of-range rows are
masked on load and store. Partial tiles evaluate the mask in-tile with `tile_mask`, a literal copy
of `structure.attends`; full tiles (every pair attends, never padding) skip it and load no
metadata. The softmax runs in log2 units (exp2, the scale folded in one multiply); matmuls
accumulate in float32. `compile_for_gpu` builds CUDA binaries without a GPU (a compile check for
CI, and registers / shared memory / spills per launch: benchmarks/triton_aot.py).
"""

from __future__ import annotations

from typing import NamedTuple

import triton
import triton.language as tl

from slm_jax.kernels.launch_profiles import KernelLaunch, TritonLaunch  # noqa: F401
from slm_jax.kinds import Kind
from slm_jax.structure import Attention

# The constants `structure.attends` compares against, as compile-time values (same names).
_CAUSAL = tl.constexpr(int(Attention.CAUSAL))
_TG = tl.constexpr(int(Attention.TG))
_TG_NOMASK = tl.constexpr(int(Attention.TG_NOMASK))
_TG_NOMASK_AUG = tl.constexpr(int(Attention.TG_NOMASK_AUG))
_CNT1 = tl.constexpr(int(Kind.CNT1))
_CNT2 = tl.constexpr(int(Kind.CNT2))
_LOG2E = tl.constexpr(1.4426950408889634)  # softmax in log2 units: exp(x) = exp2(x · log2 e)


@triton.jit
def tile_mask(q_index, q_segment, q_kind, q_pop, k_index, k_segment, k_kind, k_pop, code):
  """`structure.attends` expression for expression (query fields [BQ, 1], key fields [1, BK])."""
  is_self = k_index == q_index
  visible = ((q_segment == k_segment) & (k_index <= q_index)
             & ((q_segment != 0) | is_self))  # padding attends only itself
  compose_query = (q_kind == _CNT1) & (code != _CAUSAL)
  composed = ((k_pop == q_index) & (k_kind != _CNT2)) | is_self
  on_stack = (((code == _CAUSAL) | (code == _TG_NOMASK_AUG))
              | ((code == _TG) & (k_pop > q_index))
              | ((code == _TG_NOMASK) & ((k_kind != _CNT2) | is_self)))
  return visible & ((compose_query & composed) | (~compose_query & on_stack))


@triton.jit
def _head_code(codes_ptr, head, CODE: tl.constexpr):
  """The attention code of `head`: CODE when every head has it (a compile-time constant, so
  `tile_mask` folds to that type's expression), else read from codes (hybrids: CODE = -1)."""
  if CODE < 0:
    return tl.load(codes_ptr + head)
  else:
    return CODE


@triton.jit
def _rows(block, b, T: tl.constexpr, BLOCK: tl.constexpr, heads: tl.constexpr, head,
          HEAD_DIM: tl.constexpr, BLOCK_DIM: tl.constexpr):
  """Rows `block`·BLOCK + [0, BLOCK) of row b: their index, in-range flag, flat row, and the
  offsets / mask of their [BLOCK, BLOCK_DIM] tile of head `head` in a contiguous
  [B, T, heads, HEAD_DIM] array."""
  index = block * BLOCK + tl.arange(0, BLOCK)
  valid = index < T
  row = b * T + index
  d = tl.arange(0, BLOCK_DIM)
  offsets = (row.to(tl.int64)[:, None] * heads + head) * HEAD_DIM + d[None, :]
  tile = valid[:, None] & (d < HEAD_DIM)[None, :]
  return index, valid, row, offsets, tile


@triton.jit
def _block(block, b, T: tl.constexpr, BLOCK: tl.constexpr, heads: tl.constexpr, head,
           HEAD_DIM: tl.constexpr, BLOCK_DIM: tl.constexpr, segment_ptr, kind_ptr, pop_ptr,
           missing):
  """`_rows` plus the rows' metadata (`missing` segment outside the row)."""
  index, valid, row, offsets, tile = _rows(block, b, T, BLOCK, heads, head, HEAD_DIM, BLOCK_DIM)
  segment = tl.load(segment_ptr + row, mask=valid, other=missing)
  kind = tl.load(kind_ptr + row, mask=valid, other=0)
  pop = tl.load(pop_ptr + row, mask=valid, other=0)
  return index, valid, segment, kind, pop, offsets, tile


@triton.jit
def _load_kv(k_ptr, v_ptr, offsets, tile):
  """The k and v tiles at `offsets` (zeros outside `tile`)."""
  return (tl.load(k_ptr + offsets, mask=tile, other=0.0),
          tl.load(v_ptr + offsets, mask=tile, other=0.0))


@triton.jit
def _load_queries(q_ptr, do_ptr, lse_ptr, delta_ptr, offsets, tile, bh, T: tl.constexpr, index,
                  valid):
  """The q and do tiles at `offsets` and the rows' lse and delta (zeros outside the row)."""
  q = tl.load(q_ptr + offsets, mask=tile, other=0.0)
  do = tl.load(do_ptr + offsets, mask=tile, other=0.0)
  lse = tl.load(lse_ptr + bh * T + index, mask=valid, other=0.0)
  delta = tl.load(delta_ptr + bh * T + index, mask=valid, other=0.0)
  return q, do, lse, delta


@triton.jit
def _fwd_step(q, k, v, m_i, l_i, acc, mask, qk_scale, PRECISION: tl.constexpr,
              MASKED: tl.constexpr):
  """One key tile of the online softmax, in log2 units (scores times scale·log2 e, exp2).
  MASKED: apply `mask` (a partial tile); else every pair attends (a full tile)."""
  s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale
  if MASKED:
    s = tl.where(mask, s, float("-inf"))
  m_new = tl.maximum(m_i, tl.max(s, 1))
  if MASKED:
    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows with nothing visible yet
  else:
    m_use = m_new
  alpha = tl.exp2(m_i - m_use)
  p = tl.exp2(s - m_use[:, None])  # exp2(-inf) = 0: masked pairs add nothing
  l_i = l_i * alpha + tl.sum(p, 1)
  acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
  return m_new, l_i, acc


@triton.jit
def attention_fwd_kernel(q_ptr, k_ptr, v_ptr, segment_ptr, kind_ptr, pop_ptr, codes_ptr,
                         count_ptr, full_ptr, kblocks_ptr, o_ptr, lse_ptr,
                         T: tl.constexpr, H: tl.constexpr, G: tl.constexpr, HEAD_DIM: tl.constexpr,
                         SCALE: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr,
                         BLOCK_DIM: tl.constexpr, PRECISION: tl.constexpr, NQ: tl.constexpr,
                         NK: tl.constexpr, CODE: tl.constexpr = -1,
                         FULL_TILES: tl.constexpr = False):
  """Grid (B·H, NQ): one query block of one head; online softmax over its non-empty key blocks,
  the first `full` of them (full tiles) without the mask. lse is stored in log2 units."""
  bh = tl.program_id(0)
  qb = tl.program_id(1)
  b = bh // H
  h = bh % H
  g = h // (H // G)
  code = _head_code(codes_ptr, h, CODE)
  qk_scale = SCALE * _LOG2E
  q_index, q_valid, q_segment, q_kind, q_pop, q_offsets, q_tile = _block(
      qb, b, T, BLOCK_Q, H, h, HEAD_DIM, BLOCK_DIM, segment_ptr, kind_ptr, pop_ptr, -1)
  q = tl.load(q_ptr + q_offsets, mask=q_tile, other=0.0)
  qi, qs, qk, qp = q_index[:, None], q_segment[:, None], q_kind[:, None], q_pop[:, None]

  m_i = tl.full([BLOCK_Q], float("-inf"), tl.float32)
  l_i = tl.zeros([BLOCK_Q], tl.float32)
  acc = tl.zeros([BLOCK_Q, BLOCK_DIM], tl.float32)
  plan = bh * NQ + qb
  first = 0  # the first tile of the masked loop
  if FULL_TILES:  # full tiles first: no metadata, no mask
    first = tl.load(full_ptr + plan)
    for n in range(first):
      kf_index, kf_valid, kf_row, kv_offsets, kv_tile = _rows(
          tl.load(kblocks_ptr + plan * NK + n), b, T, BLOCK_K, G, g, HEAD_DIM, BLOCK_DIM)
      k, v = _load_kv(k_ptr, v_ptr, kv_offsets, kv_tile)
      m_i, l_i, acc = _fwd_step(q, k, v, m_i, l_i, acc, None, qk_scale, PRECISION, False)
  for n in range(first, tl.load(count_ptr + plan)):
    k_index, k_valid, k_segment, k_kind, k_pop, kv_offsets, kv_tile = _block(
        tl.load(kblocks_ptr + plan * NK + n), b, T, BLOCK_K, G, g, HEAD_DIM, BLOCK_DIM,
        segment_ptr, kind_ptr, pop_ptr, -2)
    k, v = _load_kv(k_ptr, v_ptr, kv_offsets, kv_tile)
    mask = tile_mask(qi, qs, qk, qp, k_index[None, :], k_segment[None, :], k_kind[None, :],
                     k_pop[None, :], code)
    m_i, l_i, acc = _fwd_step(q, k, v, m_i, l_i, acc, mask, qk_scale, PRECISION, True)
  # Every in-range row sees at least itself; out-of-range rows (l = 0) are not stored.
  empty = l_i == 0.0
  l_use = tl.where(empty, 1.0, l_i)
  tl.store(o_ptr + q_offsets, (acc / l_use[:, None]).to(o_ptr.dtype.element_ty), mask=q_tile)
  tl.store(lse_ptr + bh * T + q_index, tl.where(empty, 0.0, m_i + tl.log2(l_use)), mask=q_valid)


@triton.jit
def _dq_step(q, do, k, v, lse, delta, mask, qk_scale, PRECISION: tl.constexpr,
             MASKED: tl.constexpr):
  """One key tile's term p (dp − delta) k of dq (unscaled); lse in log2 units."""
  p = tl.exp2(tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale - lse)
  if MASKED:
    p = tl.where(mask, p, 0.0)
  dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
  return tl.dot((p * (dp - delta)).to(k.dtype), k, input_precision=PRECISION)


@triton.jit
def attention_bwd_dq_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, segment_ptr,
                            kind_ptr, pop_ptr, codes_ptr, count_ptr, full_ptr, kblocks_ptr,
                            dq_ptr,
                            T: tl.constexpr, H: tl.constexpr, G: tl.constexpr,
                            HEAD_DIM: tl.constexpr,
                            SCALE: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr,
                            BLOCK_DIM: tl.constexpr, PRECISION: tl.constexpr, NQ: tl.constexpr,
                            NK: tl.constexpr, CODE: tl.constexpr = -1,
                            FULL_TILES: tl.constexpr = False):
  """Grid (B·H, NQ): dq of one query block, dq = scale · Σ_k p (dp − delta) k (full tiles
  first, without the mask)."""
  bh = tl.program_id(0)
  qb = tl.program_id(1)
  b = bh // H
  h = bh % H
  g = h // (H // G)
  code = _head_code(codes_ptr, h, CODE)
  qk_scale = SCALE * _LOG2E
  q_index, q_valid, q_segment, q_kind, q_pop, q_offsets, q_tile = _block(
      qb, b, T, BLOCK_Q, H, h, HEAD_DIM, BLOCK_DIM, segment_ptr, kind_ptr, pop_ptr, -1)
  q, do, lse, delta = _load_queries(q_ptr, do_ptr, lse_ptr, delta_ptr, q_offsets, q_tile, bh, T,
                                    q_index, q_valid)
  lse, delta = lse[:, None], delta[:, None]
  qi, qs, qk, qp = q_index[:, None], q_segment[:, None], q_kind[:, None], q_pop[:, None]

  dq = tl.zeros([BLOCK_Q, BLOCK_DIM], tl.float32)
  plan = bh * NQ + qb
  first = 0
  if FULL_TILES:
    first = tl.load(full_ptr + plan)
    for n in range(first):
      kf_index, kf_valid, kf_row, kv_offsets, kv_tile = _rows(
          tl.load(kblocks_ptr + plan * NK + n), b, T, BLOCK_K, G, g, HEAD_DIM, BLOCK_DIM)
      k, v = _load_kv(k_ptr, v_ptr, kv_offsets, kv_tile)
      dq += _dq_step(q, do, k, v, lse, delta, None, qk_scale, PRECISION, False)
  for n in range(first, tl.load(count_ptr + plan)):
    k_index, k_valid, k_segment, k_kind, k_pop, kv_offsets, kv_tile = _block(
        tl.load(kblocks_ptr + plan * NK + n), b, T, BLOCK_K, G, g, HEAD_DIM, BLOCK_DIM,
        segment_ptr, kind_ptr, pop_ptr, -2)
    k, v = _load_kv(k_ptr, v_ptr, kv_offsets, kv_tile)
    mask = tile_mask(qi, qs, qk, qp, k_index[None, :], k_segment[None, :], k_kind[None, :],
                     k_pop[None, :], code)
    dq += _dq_step(q, do, k, v, lse, delta, mask, qk_scale, PRECISION, True)
  tl.store(dq_ptr + q_offsets, (dq * SCALE).to(dq_ptr.dtype.element_ty), mask=q_tile)


@triton.jit
def _dkdv_step(k, v, q, do, lse, delta, mask_t, qk_scale, PRECISION: tl.constexpr,
               MASKED: tl.constexpr):
  """One query tile's terms of dk (unscaled) and dv, transposed ([BLOCK_K, BLOCK_Q] keys down)."""
  p_t = tl.exp2(tl.dot(k, tl.trans(q), input_precision=PRECISION) * qk_scale - lse[None, :])
  if MASKED:
    p_t = tl.where(mask_t, p_t, 0.0)
  dv = tl.dot(p_t.to(do.dtype), do, input_precision=PRECISION)
  dp_t = tl.dot(v, tl.trans(do), input_precision=PRECISION)
  ds_t = p_t * (dp_t - delta[None, :])
  return tl.dot(ds_t.to(q.dtype), q, input_precision=PRECISION), dv


@triton.jit
def attention_bwd_dkdv_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, segment_ptr,
                              kind_ptr, pop_ptr, codes_ptr, qcount_ptr, qfull_ptr, qblocks_ptr,
                              dk_ptr, dv_ptr,
                              T: tl.constexpr, H: tl.constexpr, G: tl.constexpr,
                              HEAD_DIM: tl.constexpr, SCALE: tl.constexpr, BLOCK_Q: tl.constexpr,
                              BLOCK_K: tl.constexpr, BLOCK_DIM: tl.constexpr,
                              PRECISION: tl.constexpr, NQ: tl.constexpr, NK: tl.constexpr,
                              CODE: tl.constexpr = -1, FULL_TILES: tl.constexpr = False):
  """Grid (B·G, NK): dk, dv of one key block of one KV head, summed over the H/G query heads
  that read it (each with its own code and query-block list, full tiles first), in float32
  registers."""
  R: tl.constexpr = H // G
  bg = tl.program_id(0)
  kb = tl.program_id(1)
  b = bg // G
  g = bg % G
  qk_scale = SCALE * _LOG2E
  k_index, k_valid, k_segment, k_kind, k_pop, kv_offsets, kv_tile = _block(
      kb, b, T, BLOCK_K, G, g, HEAD_DIM, BLOCK_DIM, segment_ptr, kind_ptr, pop_ptr, -2)
  k, v = _load_kv(k_ptr, v_ptr, kv_offsets, kv_tile)
  # Tiles are computed transposed, [BLOCK_K, BLOCK_Q] (keys down), so every matmul has the
  # resident key block as its M dimension (Hopper's warpgroup MMA needs M >= 64).
  ki, ks, kk, kp = k_index[:, None], k_segment[:, None], k_kind[:, None], k_pop[:, None]

  dk = tl.zeros([BLOCK_K, BLOCK_DIM], tl.float32)
  dv = tl.zeros([BLOCK_K, BLOCK_DIM], tl.float32)
  for r in range(R):
    h = g * R + r
    bh = b * H + h
    code = _head_code(codes_ptr, h, CODE)
    plan = bh * NK + kb
    first = 0
    if FULL_TILES:
      first = tl.load(qfull_ptr + plan)
      for n in range(first):
        qf_index, qf_valid, qf_row, qf_offsets, qf_tile = _rows(
            tl.load(qblocks_ptr + plan * NQ + n), b, T, BLOCK_Q, H, h, HEAD_DIM, BLOCK_DIM)
        q, do, lse, delta = _load_queries(q_ptr, do_ptr, lse_ptr, delta_ptr, qf_offsets, qf_tile,
                                          bh, T, qf_index, qf_valid)
        dk_n, dv_n = _dkdv_step(k, v, q, do, lse, delta, None, qk_scale, PRECISION, False)
        dk += dk_n
        dv += dv_n
    for n in range(first, tl.load(qcount_ptr + plan)):
      q_index, q_valid, q_segment, q_kind, q_pop, q_offsets, q_tile = _block(
          tl.load(qblocks_ptr + plan * NQ + n), b, T, BLOCK_Q, H, h, HEAD_DIM, BLOCK_DIM,
          segment_ptr, kind_ptr, pop_ptr, -1)
      q, do, lse, delta = _load_queries(q_ptr, do_ptr, lse_ptr, delta_ptr, q_offsets, q_tile, bh,
                                        T, q_index, q_valid)
      mask_t = tile_mask(q_index[None, :], q_segment[None, :], q_kind[None, :], q_pop[None, :],
                         ki, ks, kk, kp, code)  # [BLOCK_K, BLOCK_Q]
      dk_n, dv_n = _dkdv_step(k, v, q, do, lse, delta, mask_t, qk_scale, PRECISION, True)
      dk += dk_n
      dv += dv_n
  tl.store(dk_ptr + kv_offsets, (dk * SCALE).to(dk_ptr.dtype.element_ty), mask=kv_tile)
  tl.store(dv_ptr + kv_offsets, dv.to(dv_ptr.dtype.element_ty), mask=kv_tile)


@triton.jit
def tile_mask_kernel(q_index_ptr, q_segment_ptr, q_kind_ptr, q_pop_ptr, k_index_ptr,
                     k_segment_ptr, k_kind_ptr, k_pop_ptr, codes_ptr, out_ptr,
                     BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr):
  """Test probe: out[c] = tile_mask of one [BLOCK_Q, BLOCK_K] tile under code codes[c] (grid C)."""
  c = tl.program_id(0)
  i = tl.arange(0, BLOCK_Q)
  j = tl.arange(0, BLOCK_K)
  mask = tile_mask(tl.load(q_index_ptr + i)[:, None], tl.load(q_segment_ptr + i)[:, None],
                   tl.load(q_kind_ptr + i)[:, None], tl.load(q_pop_ptr + i)[:, None],
                   tl.load(k_index_ptr + j)[None, :], tl.load(k_segment_ptr + j)[None, :],
                   tl.load(k_kind_ptr + j)[None, :], tl.load(k_pop_ptr + j)[None, :],
                   tl.load(codes_ptr + c))
  tl.store(out_ptr + (c * BLOCK_Q + i[:, None]) * BLOCK_K + j[None, :], mask.to(tl.int8))


def launch_config(dtype_name: str, head_dim: int) -> dict:
  """Constexprs shared by the three kernels: HEAD_DIM, SCALE, BLOCK_DIM, and PRECISION: 'ieee' for
  float32 inputs (exact float32 products, like the XLA reference; not TF32), the target's default
  for 16-bit inputs (whose products are exact in the float32 accumulator anyway)."""
  return dict(HEAD_DIM=head_dim, SCALE=float(head_dim) ** -0.5,
              BLOCK_DIM=max(16, triton.next_power_of_2(head_dim)),
              PRECISION="ieee" if dtype_name == "float32" else None)


class CompiledKernel(NamedTuple):
  """What the compiler made of one kernel for one target (`compile_for_gpu`); -1 where the tool
  that reports it (nvdisasm / cuobjdump, shipped in Triton's wheel) is missing."""

  cubin_bytes: int
  shared_bytes: int  # dynamic shared memory per block (Triton's metadata)
  registers: int  # per thread
  stack_bytes: int  # per-thread local memory frame (where spilled registers live)
  spill_stores: int  # local-memory stores (STL) in the SASS


def _resource_usage(cubin: bytes) -> tuple[int, int]:
  """(registers, stack bytes) of the one kernel in `cubin`, read by `cuobjdump
  --dump-resource-usage`; (-1, -1) without cuobjdump."""
  import re  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  import tempfile  # pylint: disable=g-import-not-at-top
  try:
    tool = triton.knobs.nvidia.cuobjdump.path
    with tempfile.NamedTemporaryFile(suffix=".cubin") as handle:
      handle.write(cubin)
      handle.flush()
      report = subprocess.run([tool, "--dump-resource-usage", handle.name], capture_output=True,
                              text=True, check=True, timeout=60).stdout
  except Exception:  # pylint: disable=broad-except  (no cuobjdump in this Triton)
    return -1, -1
  found = re.search(r"REG:(\d+)\s+STACK:(\d+)", report)
  return (int(found.group(1)), int(found.group(2))) if found else (-1, -1)


def compile_for_gpu(arch: int = 90, dtype_name: str = "bfloat16", head_dim: int = 64,
                    block: int = 64, num_warps: int = 4, num_stages: int = 2,
                    code: int = -1, launch: TritonLaunch | None = None) -> dict:
  """Compiles the three kernels to CUDA binaries for sm_`arch` without a GPU (Triton's compiler
  and its bundled ptxas; needs TRITON_INTERPRET unset/0 when this module was imported).

  Each kernel uses its entry of `launch` if given, else `block` × `block` tiles with `num_warps` /
  `num_stages`; `code` is the CODE constexpr (-1: per-head codes). Returns {kernel name:
  `CompiledKernel`}; raises on any compile error (e.g. more shared memory than the target has).
  """
  from triton.backends.compiler import GPUTarget  # pylint: disable=g-import-not-at-top
  from triton.compiler import ASTSource  # pylint: disable=g-import-not-at-top

  element = {"bfloat16": "*bf16", "float16": "*fp16", "float32": "*fp32"}[dtype_name]
  pointer = {name: element for name in ("q_ptr", "k_ptr", "v_ptr", "do_ptr", "o_ptr", "dq_ptr",
                                        "dk_ptr", "dv_ptr")}
  pointer.update(lse_ptr="*fp32", delta_ptr="*fp32")
  results = {}
  launch = launch or TritonLaunch.uniform(block, block, num_warps, num_stages)
  kernels = (attention_fwd_kernel, attention_bwd_dq_kernel, attention_bwd_dkdv_kernel)
  for kernel, one in zip(kernels, launch):
    length = 16 * max(one.block_q, one.block_k)
    constexprs = dict(T=length, H=8, G=2, BLOCK_Q=one.block_q, BLOCK_K=one.block_k,
                      NQ=length // one.block_q, NK=length // one.block_k, CODE=code,
                      FULL_TILES=one.full_tiles, **launch_config(dtype_name, head_dim))
    signature = {arg: "constexpr" if arg in constexprs else pointer.get(arg, "*i32")
                 for arg in kernel.arg_names}
    compiled = triton.compile(ASTSource(kernel, signature, constexprs),
                              target=GPUTarget("cuda", arch, 32),
                              options=dict(num_warps=one.num_warps, num_stages=one.num_stages))
    try:
      sass = compiled.asm["sass"]
      spills = sum(1 for line in sass.splitlines() if "\tSTL" in line or " STL" in line)
    except Exception:  # pylint: disable=broad-except  (no nvdisasm)
      spills = -1
    cubin = compiled.asm["cubin"]
    results[kernel.fn.__name__] = CompiledKernel(len(cubin), compiled.metadata.shared,
                                                 *_resource_usage(cubin), spills)
  return results
