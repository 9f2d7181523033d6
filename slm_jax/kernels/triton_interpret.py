"""The Triton kernels end to end on CPU: `triton_attention` with jax-triton replaced by a stand-in
that runs the same kernels under Triton's interpreter (`TRITON_INTERPRET=1`) on torch CPU
tensors, through `jax.pure_callback`. For the tests and `benchmarks/kernel_check.py
--interpret`; needs the `triton-test` extra (torch CPU wheel + triton). Correctness only: the
interpreter runs numpy per program instance, so times mean nothing.

TRITON_INTERPRET must be 1 before `slm_jax.kernels.triton_kernels` is first imported
(`@triton.jit` reads it when a kernel is decorated): `enable()` sets it and checks.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import types
from typing import Iterator

import jax
import jax.numpy as jnp
import numpy as np

_WRAPPER = "slm_jax.kernels.triton_attention"
# (kernel name, grid, constexprs, num_warps) of every launch through the stand-in.
LAUNCHES: list[tuple] = []


def enable() -> None:
  """Sets TRITON_INTERPRET=1; raises if the kernels were already compiled for a GPU."""
  os.environ["TRITON_INTERPRET"] = "1"
  kernels = sys.modules.get("slm_jax.kernels.triton_kernels")
  interpreter = importlib.import_module("triton.runtime.interpreter")
  if kernels is not None and not isinstance(kernels.attention_fwd_kernel,
                                            interpreter.InterpretedFunction):
    raise RuntimeError("slm_jax.kernels.triton_kernels was imported without TRITON_INTERPRET=1; "
                       "set it before the first import (a fresh process)")


def to_torch(x: np.ndarray):
  """A torch CPU tensor of `x` (bfloat16 from ml_dtypes bits)."""
  import ml_dtypes  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  x = np.ascontiguousarray(x)
  if x.dtype == ml_dtypes.bfloat16:
    return torch.from_numpy(x.view(np.uint16)).view(torch.bfloat16)
  return torch.from_numpy(x)


def _dot_in_float32(create_dot):
  """Triton's interpreter keeps bfloat16 as uint16 bits and its `tl.dot` multiplies those bits
  (triton 3.9, triton-lang/triton#11584: "not supported yet"); upcast bf16 operands to float32
  first, which is exact and is what the GPU's bf16 MMA with float32 accumulation computes."""
  interpreter = importlib.import_module("triton.runtime.interpreter")
  language = importlib.import_module("triton.language")

  def upcast(x):
    if x.dtype.scalar != language.bfloat16:
      return x
    bits = (x.data.astype(np.uint32) << np.uint32(16)).view(np.float32)
    return interpreter.TensorHandle(bits, language.float32)

  def dot(self, a, b, d, input_precision, max_num_imprecise_acc):
    return create_dot(self, upcast(a), upcast(b), d, input_precision, max_num_imprecise_acc)

  return dot


@contextlib.contextmanager
def bf16_dot() -> Iterator[None]:
  """The interpreter's `tl.dot` exact for bfloat16 operands (`_dot_in_float32`) while active."""
  builder = importlib.import_module("triton.runtime.interpreter").InterpreterBuilder
  original = builder.create_dot
  builder.create_dot = _dot_in_float32(original)
  try:
    yield
  finally:
    builder.create_dot = original


def triton_call(*args, kernel, grid, out_type=None, num_warps=None, num_stages=None, **kwargs):
  """jax_triton.triton_call's contract: array args, then one pointer per output; kwargs are
  constexprs. Runs the kernel under the interpreter on the host through jax.pure_callback and
  records the launch in LAUNCHES."""
  import torch  # pylint: disable=g-import-not-at-top
  LAUNCHES.append((kernel.fn.__name__, grid, dict(kwargs), num_warps))
  del num_stages
  outs = out_type if out_type is not None else kwargs.pop("out_shape")
  single = not isinstance(outs, (tuple, list))
  outs = (outs,) if single else tuple(outs)
  dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16}

  def host(*arrays):
    tensors = [to_torch(np.array(a)) for a in arrays]  # writable copies
    results = [torch.empty(o.shape, dtype=dtypes.get(jnp.dtype(o.dtype).name, torch.float32))
               for o in outs]
    kernel[grid](*tensors, *results, **kwargs)
    return tuple(np.asarray(r.float().numpy()).astype(o.dtype) for r, o in zip(results, outs))

  results = jax.pure_callback(host, outs, *args)
  return results[0] if single else results


def stand_in() -> types.ModuleType:
  """A `jax_triton` module whose triton_call is `triton_call` above."""
  module = types.ModuleType("jax_triton")
  module.triton_call = triton_call
  return module


def import_wrapper() -> types.ModuleType:
  """`slm_jax.kernels.triton_attention` imported against the stand-in (interpret mode on), with
  the interpreter's bf16 dot made exact for the rest of the process."""
  enable()
  sys.modules["jax_triton"] = stand_in()
  sys.modules.pop(_WRAPPER, None)
  builder = importlib.import_module("triton.runtime.interpreter").InterpreterBuilder
  if not getattr(builder.create_dot, "_slm_upcast", False):
    builder.create_dot = _dot_in_float32(builder.create_dot)
    builder.create_dot._slm_upcast = True
  return importlib.import_module(_WRAPPER)
