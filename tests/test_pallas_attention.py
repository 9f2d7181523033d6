"""The Pallas structural attention kernel (interpret mode on CPU) against `xla_attention`.

Outputs and gradients (dq, dk, dv through the custom VJP: the flash backward kernels) must equal
the XLA reference and its jax.vjp: float32 to rtol = atol = 1e-5; bfloat16 inputs to within
twice the reference's own bf16 error (vs float32) plus 1e-2 — both run bf16 matmuls with fp32
softmax, in different orders. Cases: every attention code in one launch (GQA: each KV head shared
by heads of different codes), both hybrids and each single type through the public function,
packed rows of random trees and GUM with several documents and padding, rows that are not a
multiple of the block size, several block sizes, batches split into row chunks (scalar-memory
budget), and a tiny Decoder with attention_impl="pallas_tpu" (through the registry).

Interpret-mode kernels compile slowly on XLA:CPU; every function is jitted once per shape with
backend optimizations off (the kernels' numerics do not depend on them) and reused across data.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import slm_jax.kernels.tpu_attention as tpu_attention
from slm_jax.kernels.tpu_attention import attention_with_codes, pallas_attention
from slm_jax.model import ATTENTION_KERNELS, Decoder, resolve_attention_impl, xla_attention
from slm_jax.structure import Attention, parse_attention
from tests.shared_data import shared_data_dir
from tests.test_block_plan import gum_rows, random_rows

FAST_COMPILE = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}
jit = functools.partial(jax.jit, compiler_options=FAST_COMPILE)
TOL32 = dict(rtol=1e-5, atol=1e-5)


def inputs(seed: int, B: int, T: int, H: int, G: int, K: int, dtype=jnp.float32):
  rng = np.random.default_rng(seed)
  make = lambda *shape: jnp.asarray(rng.normal(size=shape), dtype)
  return make(B, T, H, K), make(B, T, G, K), make(B, T, G, K), make(B, T, H, K)


def as_jax(meta):
  return jax.tree.map(jnp.asarray, meta)


def realistic_rows(length: int, rows: int, seed: int):
  """GUM lin2 rows when ../shared/data/gum exists, else random-tree rows (never skips)."""
  root = shared_data_dir()
  if root is not None and (root / "gum").is_dir():
    return gum_rows(length, rows=rows)
  return random_rows(seed=seed, length=length, rows=rows)


def value_and_vjp(fn):
  """jit'd (q, k, v, meta, cotangent) -> (o, (dq, dk, dv)) of fn(q, k, v, meta)."""

  def run(q, k, v, meta, do):
    o, pull = jax.vjp(lambda q_, k_, v_: fn(q_, k_, v_, meta), q, k, v)
    return o, pull(do.astype(o.dtype))

  return jit(run)


def reference_per_head(codes_H):
  """xla_attention head by head with each head's own code (the oracle for mixed launches)."""

  def fn(q, k, v, meta):
    H, G = q.shape[2], k.shape[2]
    outs = [xla_attention(q[:, :, h:h + 1], k[:, :, h // (H // G)][:, :, None],
                          v[:, :, h // (H // G)][:, :, None], meta,
                          parse_attention(Attention(int(c)).name.lower()))
            for h, c in enumerate(codes_H)]
    return jnp.concatenate(outs, axis=2)

  return fn


def assert_match(got, want, **tol):
  (o, grads), (o_ref, grads_ref) = got, want
  np.testing.assert_allclose(np.asarray(o), np.asarray(o_ref), **tol, err_msg="output")
  for name, g, g_ref in zip(("dq", "dk", "dv"), grads, grads_ref):
    np.testing.assert_allclose(np.asarray(g), np.asarray(g_ref), **tol, err_msg=name)


def test_found_through_the_kernel_table():
  assert resolve_attention_impl("pallas_tpu", "tpu") == "pallas_tpu"
  assert ATTENTION_KERNELS["pallas_tpu"] is pallas_attention


def test_every_code_in_one_launch_gqa_fp32():
  """Heads [causal, tg, tg_nomask, tg_nomask_aug] × 2; KV head g serves heads 2g, 2g+1."""
  codes = np.asarray([0, 1, 2, 3, 0, 1, 2, 3], np.int32)
  kernel = value_and_vjp(lambda q, k, v, m: attention_with_codes(q, k, v, m, codes, block_q=32,
                                                                   block_k=16))
  reference = value_and_vjp(reference_per_head(codes))
  for seed, meta in ((1, random_rows(seed=21, length=128, rows=2)),
                     (2, realistic_rows(128, rows=2, seed=22))):
    q, k, v, do = inputs(seed, 2, 128, 8, 4, 16)
    meta = as_jax(meta)
    assert_match(kernel(q, k, v, meta, do), reference(q, k, v, meta, do), **TOL32)


@pytest.mark.parametrize("name", ["causal", "tg", "tg_nomask", "tg_nomask_aug"])
def test_single_types_fp32(name):
  spec = parse_attention(name)
  meta = as_jax(random_rows(seed=31, length=64, rows=2))
  q, k, v, do = inputs(3, 2, 64, 2, 2, 16)
  kernel = value_and_vjp(lambda q, k, v, m: pallas_attention(q, k, v, m, spec, block_q=16,
                                                               block_k=16))
  reference = value_and_vjp(lambda q, k, v, m: xla_attention(q, k, v, m, spec))
  assert_match(kernel(q, k, v, meta, do), reference(q, k, v, meta, do), **TOL32)


@pytest.mark.parametrize("name", ["mix(tg_nomask,tg)", "mix(causal,tg)"])
def test_hybrids_unaligned_rows_fp32(name):
  """T = 100 is padded to the blocks inside; GQA with 4 query heads on 2 KV heads."""
  spec = parse_attention(name)
  kernel = value_and_vjp(lambda q, k, v, m: pallas_attention(q, k, v, m, spec, block_q=16,
                                                               block_k=32))
  reference = value_and_vjp(lambda q, k, v, m: xla_attention(q, k, v, m, spec))
  for seed in (41, 42):
    meta = as_jax(random_rows(seed=seed, length=100, rows=2))
    q, k, v, do = inputs(seed, 2, 100, 4, 2, 32)
    assert_match(kernel(q, k, v, meta, do), reference(q, k, v, meta, do), **TOL32)


def test_row_chunks_when_plan_exceeds_scalar_memory(monkeypatch):
  monkeypatch.setattr(tpu_attention, "SMEM_PLAN_ENTRIES", 40)  # one row: 2·(4·4 + 4) words
  spec = parse_attention("mix(causal,tg)")
  meta = as_jax(random_rows(seed=51, length=128, rows=3))
  q, k, v, do = inputs(5, 3, 128, 2, 1, 16)
  kernel = value_and_vjp(lambda q, k, v, m: pallas_attention(q, k, v, m, spec, block_q=32,
                                                               block_k=32))
  reference = value_and_vjp(lambda q, k, v, m: xla_attention(q, k, v, m, spec))
  assert_match(kernel(q, k, v, meta, do), reference(q, k, v, meta, do), **TOL32)


def test_bf16_inputs():
  """bf16 q/k/v: error vs the float32 result within 2× the XLA bf16 path's error + 1e-2."""
  spec = parse_attention("mix(tg_nomask,tg)")
  meta = as_jax(realistic_rows(128, rows=2, seed=61))
  q, k, v, do = inputs(6, 2, 128, 4, 2, 32)
  bf = lambda *xs: [x.astype(jnp.bfloat16) for x in xs]
  kernel = value_and_vjp(lambda q, k, v, m: pallas_attention(q, k, v, m, spec, block_q=32,
                                                               block_k=32))
  reference = value_and_vjp(lambda q, k, v, m: xla_attention(q, k, v, m, spec))
  exact = reference(q, k, v, meta, do)
  got = kernel(*bf(q, k, v), meta, do)
  xla16 = reference(*bf(q, k, v), meta, do)
  assert got[0].dtype == jnp.bfloat16 and all(g.dtype == jnp.bfloat16 for g in got[1])
  flat = lambda r: [r[0]] + list(r[1])
  for name, g, x, e in zip(("o", "dq", "dk", "dv"), flat(got), flat(xla16), flat(exact)):
    e = np.asarray(e, np.float32)
    err = np.abs(np.asarray(g, np.float32) - e).max()
    budget = 2 * np.abs(np.asarray(x, np.float32) - e).max() + 1e-2
    assert err <= budget, (name, err, budget)


def test_decoder_logits_match_xla():
  from tests.test_model import (  # pylint: disable=g-import-not-at-top
      CATS, HUNGRY_CAT, WILL_GO, row, tiny)
  tokens, meta = row(WILL_GO, HUNGRY_CAT, CATS, length=48)
  logits = {}
  for impl in ("xla", "pallas_tpu"):
    model = Decoder(tiny("mix(tg_nomask,tg)", attention_impl=impl, n_kv_heads=2, n_layers=1),
                    rngs=nnx.Rngs(0))
    assert model.blocks[0].attn.impl == impl
    graphdef, state = nnx.split(model)
    forward = jit(lambda state_, t, md: nnx.merge(graphdef, state_)(t, md))
    logits[impl] = np.asarray(forward(state, tokens, meta))
  np.testing.assert_allclose(logits["pallas_tpu"], logits["xla"], rtol=1e-5, atol=1e-5)


def test_rejects_bad_calls():
  spec = parse_attention("tg")
  meta = as_jax(random_rows(seed=1, length=64, rows=1))
  q, k, v, _ = inputs(0, 1, 64, 2, 2, 16)
  with pytest.raises(ValueError, match="self-attention"):
    pallas_attention(q, k[:, :32], v[:, :32], meta, spec)
  with pytest.raises(ValueError, match="TPU only"):
    pallas_attention(q, k, v, meta, spec, interpret=False)
  with pytest.raises(ValueError, match="head codes"):
    attention_with_codes(q, k, v, meta, [1, 1, 1])
