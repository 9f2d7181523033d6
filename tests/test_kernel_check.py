"""benchmarks/kernel_check.py: the first command on a new accelerator. It must pass a correct
kernel (here the Pallas kernel, interpreted on CPU) and fail a wrong one."""

from __future__ import annotations

import importlib.util
import pathlib

import jax.numpy as jnp
import pytest

from slm_jax.model import attention as attention_module

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "kernel_check.py"
SMALL = dict(length=128, rows=2, heads=2, kv_heads=1, head_dim=16, block_q=32, block_k=32)


@pytest.fixture(scope="module")
def kernel_check():
  spec = importlib.util.spec_from_file_location("kernel_check", SCRIPT)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_packed_rows_hold_several_documents_and_padding(kernel_check):
  kinds, segment = kernel_check.packed_rows(128, 2)
  assert kinds.shape == segment.shape == (2, 128)
  assert len(set(segment[0].tolist()) - {0}) >= 2  # several documents in a row
  assert (segment[-1, -20:] == 0).all() and (kinds[-1, -20:] == 0).all()


@pytest.mark.slow  # the whole kernel_check table in interpret mode; test_pallas_attention covers the kernel in CI
def test_the_pallas_kernel_passes(kernel_check, capsys):
  attention_module.resolve_attention_impl("pallas_tpu")  # registers the kernel
  assert kernel_check.check("pallas_tpu", **SMALL)
  table = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
  assert len(table) == 1 + 2 * len(kernel_check.ATTENTIONS)  # header, one row per case
  assert all(line.endswith("| yes |") for line in table[1:])


def test_a_slightly_wrong_kernel_fails(kernel_check, monkeypatch, capsys):
  def off_by_a_little(q, k, v, meta, spec, **_):
    return attention_module.xla_attention(q, k, v, meta, spec) * jnp.asarray(1.05, q.dtype)

  monkeypatch.setitem(attention_module.ATTENTION_KERNELS, "wrong", off_by_a_little)
  assert not kernel_check.check("wrong", **SMALL)
  assert "| NO |" in capsys.readouterr().out
