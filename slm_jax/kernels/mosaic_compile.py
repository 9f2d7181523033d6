"""The fused attention kernel compiled by the real TPU compiler for a chip, from any host.

`compile_attention(case, devices)` traces forward + backward of `attention_with_codes` (the
gradient of the output's sum with respect to q, k and v) on abstract inputs, with a mesh of
`devices` in force (`target.use_mesh`; e.g. one device of a TPU topology that libtpu describes
without a chip, `aot.tpu_devices`), lowers it for that platform and compiles it. The result
counts the Mosaic calls in the lowered module (`tpu_custom_call`: forward, dQ, dK/dV — 3 when the
kernel really went through Mosaic, 0 when it ran the Pallas interpreter) and keeps the compiler's
error, first line, when it refused. Tests (tests/test_mosaic_compile.py) and the limits table
(benchmarks/mosaic_limits.py) are built on it.
"""

from __future__ import annotations

import dataclasses
import re
import time
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from slm_jax.kernels import target, tpu_attention
from slm_jax.structure import RowMetadata

MOSAIC_CALL = "tpu_custom_call"  # the custom call a Mosaic kernel lowers to
KERNEL_CALLS = 3  # forward, dQ, dK/dV


@dataclasses.dataclass(frozen=True)
class AttentionCase:
  """Shapes and settings of one attention call (B rows of T tokens, H query / G KV heads of
  dim K; `codes` one attention code per head)."""

  B: int
  T: int
  H: int
  G: int
  K: int
  dtype: str
  codes: tuple[int, ...]
  block_q: int = tpu_attention.BLOCK_Q
  block_k: int = tpu_attention.BLOCK_K
  interpret: bool | None = None  # None: from the target (Mosaic on a TPU)

  def describe(self) -> str:
    return (f"B={self.B} T={self.T} H={self.H} G={self.G} K={self.K} {self.dtype} "
            f"codes={','.join(map(str, sorted(set(self.codes))))} "
            f"blocks={self.block_q}x{self.block_k}")


@dataclasses.dataclass(frozen=True)
class CompiledAttention:
  case: AttentionCase
  device_kind: str
  mosaic_calls: int  # Mosaic calls in the lowered module
  launches_per_call: int  # rows per launch divides B: B / rows launches (the chunked path > 1)
  seconds: float  # lowering + compiling
  error: str = ""  # the first line of the compiler's (or lowering's) error; "" = compiled
  detail: str = dataclasses.field(default="", repr=False)  # the whole message

  @property
  def ok(self) -> bool:
    return not self.error and self.mosaic_calls == KERNEL_CALLS


def _abstract_inputs(case: AttentionCase):
  dtype = jnp.dtype(case.dtype)
  q = jax.ShapeDtypeStruct((case.B, case.T, case.H, case.K), dtype)
  kv = jax.ShapeDtypeStruct((case.B, case.T, case.G, case.K), dtype)
  field = lambda d: jax.ShapeDtypeStruct((case.B, case.T), d)
  meta = RowMetadata(field(jnp.int8), *(field(jnp.int32) for _ in RowMetadata._fields[1:]))
  return q, kv, kv, meta


def one_axis_mesh(devices: Sequence[Any]) -> jax.sharding.Mesh:
  return jax.sharding.Mesh(np.asarray(devices), ("rows",))


def lower_attention(case: AttentionCase, devices: Sequence[Any]):
  """The lowered forward + backward of `case` for `devices` (a mesh over them in force)."""
  codes = np.asarray(case.codes, np.int32)

  def loss(q, k, v, meta):
    o = tpu_attention.attention_with_codes(q, k, v, meta, codes, block_q=case.block_q,
                                           block_k=case.block_k, interpret=case.interpret)
    return o.astype(jnp.float32).sum()

  grad = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
  with target.use_mesh(one_axis_mesh(devices)):
    return grad.trace(*_abstract_inputs(case)).lower(lowering_platforms=(devices[0].platform,))


def first_line(error: BaseException) -> str:
  """"Type: first non-empty line" of an error (the compiler's messages run to many lines)."""
  lines = [line.strip() for line in str(error).splitlines() if line.strip()]
  return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def compile_attention(case: AttentionCase, devices: Sequence[Any]) -> CompiledAttention:
  """Lowers and compiles `case` for `devices`; a refusal is kept as `error`, not raised."""
  started = time.time()
  with target.use_mesh(one_axis_mesh(devices)):
    kind = target.device_kind()
  words = tpu_attention.plan_words_per_row(case.T, len(set(case.codes)), case.block_q,
                                           case.block_k)
  launches = case.B // tpu_attention.rows_per_launch(case.B, words)
  calls = 0
  try:
    lowered = lower_attention(case, devices)
    calls = lowered.as_text().count(MOSAIC_CALL)
    lowered.compile()
  except Exception as error:  # pylint: disable=broad-except  # the compiler's refusal is data here
    return CompiledAttention(case, kind, calls, launches, time.time() - started,
                             first_line(error), str(error))
  return CompiledAttention(case, kind, calls, launches, time.time() - started)


# --- limits read from the compiler's refusals -----------------------------------------------------

KERNELS = ("forward", "dq", "dkv")  # tpu_attention's kernel names (VMEM_LIMIT_BYTES keys)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_VMEM_OOM = (  # over the scoped limit; over the chip's VMEM
    re.compile(r"Scoped allocation with size ([\d.]+)([KMG]?) and limit ([\d.]+)([KMG]?)"),
    re.compile(r"Used ([\d.]+)([KMG]?) of ([\d.]+)([KMG]?) vmem"))
_SMEM_OOM = re.compile(r"Used ([\d.]+)([KMG]?) of ([\d.]+)([KMG]?) smem")
_SMEM_ALLOCATION = re.compile(r"would exceed memory \(size=(\d+)\).*space=smem")


def _bytes(number: str, unit: str) -> int:
  return int(float(number) * _UNITS[unit])


def vmem_oom(result: CompiledAttention) -> tuple[int, int] | None:
  """(VMEM asked for, the scoped limit or the chip's VMEM) of a refusal for lack of VMEM, else
  None."""
  for pattern in _VMEM_OOM:
    found = pattern.search(result.detail)
    if found:
      return _bytes(*found.group(1, 2)), _bytes(*found.group(3, 4))
  return None


def smem_oom(result: CompiledAttention) -> tuple[int | None, int] | None:
  """(SMEM used or None, SMEM capacity) of a refusal for lack of scalar memory, else None."""
  found = _SMEM_OOM.search(result.detail)
  if found:
    return _bytes(*found.group(1, 2)), _bytes(*found.group(3, 4))
  found = _SMEM_ALLOCATION.search(result.detail)
  return (None, int(found.group(1))) if found else None


def vmem_need(case: AttentionCase, devices: Sequence[Any], ceiling: int,
              start: int = 16 << 10, max_tries: int = 16) -> int | None:
  """The smallest scoped VMEM limit (bytes), given to all three kernels, at which forward +
  backward of `case` compile, to 2% or 64 KiB. (Per kernel it is not well defined: one kernel's
  need moves with the others' limits.) The limit is first raised to what each refusal says was
  asked for until it compiles; as the compiler sizes some buffers by the limit, that can
  overshoot, so the limit is then bisected between the last refusal and the first success.
  None: more than `ceiling` (or than the chip has)."""
  refused, limit = 0, start
  for _ in range(max_tries):
    result = _compile_with_limit(case, devices, limit)
    if result.ok:
      break
    refused = limit
    asked = vmem_oom(result)
    if asked is None:
      raise RuntimeError(f"{case.describe()} at {limit} B of VMEM: {result.error}")
    limit = max(asked[0] + (10 << 10), limit + (16 << 10))  # past the 0.01 MiB rounding
    if limit > ceiling:
      return None
  else:
    raise RuntimeError(f"{case.describe()}: no VMEM limit found in {max_tries} tries")
  compiles = limit
  while compiles - refused > max(64 << 10, compiles // 50):
    middle = (refused + compiles) // 2
    if _compile_with_limit(case, devices, middle).ok:
      compiles = middle
    else:
      refused = middle
  return compiles


def _compile_with_limit(case, devices, limit: int) -> CompiledAttention:
  tpu_attention.VMEM_LIMIT_BYTES.update({kernel: limit for kernel in KERNELS})
  try:
    return compile_attention(case, devices)
  finally:
    tpu_attention.VMEM_LIMIT_BYTES.clear()


def plan_case(words: int, T: int = 2048, block: int = tpu_attention.BLOCK_Q) -> AttentionCase:
  """One head of dim 128 over as many rows of T tokens as make a plan of about `words` int32
  words (whole rows: `plan_words_per_row` apart)."""
  per_row = tpu_attention.plan_words_per_row(T, 1, block, block)
  return AttentionCase(max(1, round(words / per_row)), T, 1, 1, 128, "bfloat16", (0,), block,
                       block)


def compile_one_launch(case: AttentionCase, devices: Sequence[Any]) -> CompiledAttention:
  """`case` with its whole plan in one launch (no row chunks), whatever `SMEM_PLAN_ENTRIES` says."""
  budget = tpu_attention.SMEM_PLAN_ENTRIES
  tpu_attention.SMEM_PLAN_ENTRIES = 1 << 62
  try:
    return compile_attention(case, devices)
  finally:
    tpu_attention.SMEM_PLAN_ENTRIES = budget


def largest_plan(devices: Sequence[Any], fits: int, too_big: int, T: int = 2048) -> int:
  """The most plan words (whole rows of `plan_case`) one launch compiles with, by bisection
  between a plan that compiles (`fits` words) and one refused for scalar memory (`too_big`)."""
  per_row = tpu_attention.plan_words_per_row(T, 1)
  low, high = plan_case(fits, T).B, plan_case(too_big, T).B
  while high - low > 1:
    middle = (low + high) // 2
    result = compile_one_launch(plan_case(middle * per_row, T), devices)
    if result.ok:
      low = middle
    elif smem_oom(result):
      high = middle
    else:
      raise RuntimeError(f"{result.case.describe()}: {result.error}")
  return low * per_row
