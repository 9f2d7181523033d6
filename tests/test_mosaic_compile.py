"""The fused Pallas attention kernel through the real TPU compiler (Mosaic in libtpu), on this
CPU machine: forward + backward of every attention the configurations use, both dtypes, the
configs' block size and head dims, GQA, unaligned rows and a plan too large for one launch's
scalar memory, compiled for v5e and v6e chips. A case passes only if the lowered module holds
the kernel's three Mosaic calls (forward, dQ, dK/dV) and libtpu compiles it: a kernel that fell
back to the Pallas interpreter has none (the last test shows that this is caught).

Small shapes (one chip, T ≤ 2048, few heads): each case compiles in about a second."""

from __future__ import annotations

import itertools

import jax
import numpy as np
import pytest

from slm_jax import aot, cli
from slm_jax.configurations import ATTENTIONS
from slm_jax.kernels import mosaic_compile, target, tpu_attention
from slm_jax.model.attention import resolve_attention_impl
from slm_jax.structure import parse_attention
from slm_jax.train.run_config import SCALE_SPECS
from tests.tpu_topology import LIBTPU_ENV, require_libtpu, topology_devices

GENERATIONS = ("v5e-8", "v6e-8")
DTYPES = ("bfloat16", "float32")
HEAD_DIMS = sorted({s.d_model // s.n_heads for s in SCALE_SPECS.values()})  # 32, 64, 88, 128


def _cases():
  """Each attention × dtype once; every attention on both chips (its dtypes alternate them),
  the head dims in turn, GQA (4 query heads on 2 KV heads) in every other case, and every third
  row length unaligned to the 128-blocks (padded inside, as pause2's 2049)."""
  for i, (name, dtype) in enumerate(itertools.product(ATTENTIONS, DTYPES)):
    a, d = divmod(i, len(DTYPES))
    yield pytest.param(GENERATIONS[(a + d) % 2], name, dtype, HEAD_DIMS[i % len(HEAD_DIMS)],
                       2 if i % 2 else 4, 200 if i % 3 == 2 else 256,
                       id=f"{name}-{dtype}-{GENERATIONS[(a + d) % 2]}")


def _codes(name: str, H: int) -> tuple[int, ...]:
  return tuple(int(c) for c in parse_attention(name).head_codes(H))


def _assert_mosaic(result: mosaic_compile.CompiledAttention):
  assert result.mosaic_calls == mosaic_compile.KERNEL_CALLS, (
      f"{result.case.describe()}: {result.mosaic_calls} Mosaic calls in the lowered module "
      f"(expected {mosaic_compile.KERNEL_CALLS}: the kernel ran the Pallas interpreter)")
  assert not result.error, f"{result.case.describe()} on {result.device_kind}: {result.error}"


@pytest.mark.parametrize("topology,name,dtype,K,G,T", list(_cases()))
def test_forward_and_backward_compile_through_mosaic(topology, name, dtype, K, G, T):
  devices = topology_devices(topology)[:1]
  case = mosaic_compile.AttentionCase(2, T, 4, G, K, dtype, _codes(name, 4))
  assert (case.block_q, case.block_k) == (tpu_attention.BLOCK_Q, tpu_attention.BLOCK_K)
  result = mosaic_compile.compile_attention(case, devices)
  assert result.device_kind.startswith(f"TPU {topology[:2]}")  # the chip compiled for
  _assert_mosaic(result)


def test_a_plan_larger_than_one_launchs_scalar_memory_compiles_in_row_chunks():
  """A hybrid with GQA whose plan is twice `SMEM_PLAN_ENTRIES` words runs in several launches
  (`lax.map` over row chunks), each compiled by Mosaic."""
  T, codes = 2048, _codes("mix(causal,tg)", 2)
  words = tpu_attention.plan_words_per_row(T, len(set(codes)))
  B = 2 * tpu_attention.SMEM_PLAN_ENTRIES // words + 2
  case = mosaic_compile.AttentionCase(B, T, 2, 1, 128, "bfloat16", codes)
  result = mosaic_compile.compile_attention(case, topology_devices("v6e-8")[:1])
  assert result.launches_per_call > 1
  _assert_mosaic(result)


def test_the_target_is_the_mesh_in_force_not_the_host():
  tpu = jax.sharding.Mesh(np.asarray(topology_devices("v5e-8")[:1]), ("rows",))
  cpu = jax.sharding.Mesh(np.asarray(jax.devices()[:1]), ("rows",))
  assert target.platform() == "cpu" and not tpu_attention.uses_mosaic()
  with target.use_mesh(tpu):
    assert target.platform() == "tpu" and target.device_kind() == "TPU v5 lite"
    assert tpu_attention.uses_mosaic() and not tpu_attention.uses_mosaic(interpret=True)
    assert resolve_attention_impl("auto") == "pallas_tpu"
  with target.use_mesh(cpu):
    assert resolve_attention_impl("auto") == "xla"
    with pytest.raises(ValueError, match="Mosaic for TPU only .the target is cpu"):
      tpu_attention.uses_mosaic(interpret=False)


def test_the_interpreter_on_a_tpu_target_is_caught():
  """The negative control: the same case forced into interpret mode lowers without a Mosaic
  call (and compiles: the interpreter is plain XLA), which the checks above refuse."""
  case = mosaic_compile.AttentionCase(2, 256, 4, 2, 64, "float32", _codes("tg", 4),
                                      interpret=True)
  result = mosaic_compile.compile_attention(case, topology_devices("v5e-8")[:1])
  assert result.mosaic_calls == 0 and not result.error and not result.ok
  with pytest.raises(AssertionError, match="ran the Pallas interpreter"):
    _assert_mosaic(result)


def test_a_kernel_the_compiler_refuses_is_one_line_naming_the_case(monkeypatch):
  monkeypatch.setitem(tpu_attention.VMEM_LIMIT_BYTES, "dkv", 64 << 10)
  case = mosaic_compile.AttentionCase(2, 256, 4, 4, 128, "float32", _codes("tg", 4))
  result = mosaic_compile.compile_attention(case, topology_devices("v6e-8")[:1])
  assert not result.ok and "\n" not in result.error
  assert mosaic_compile.vmem_oom(result)[1] == 64 << 10  # (asked for, the limit we set)


def test_aot_errors_are_one_line(monkeypatch, capsys):
  """A topology libtpu does not know, and a train step whose kernel does not compile."""
  path = require_libtpu()
  for key, value in {**LIBTPU_ENV, "TPU_LIBRARY_PATH": path}.items():
    monkeypatch.setenv(key, value)
  monkeypatch.setitem(aot.TOPOLOGIES, "v9-8", aot.Topology("v9:2x2", "default", (2, 2, 1), 16))
  with pytest.raises(cli.CliError, match=r"^--topology=v9-8: libtpu \(.*\) does not know "
                     r"'v9:2x2' \(.*\); pick another topology") as refused:
    aot.tpu_devices("v9-8")
  assert "\n" not in str(refused.value)
  monkeypatch.setitem(tpu_attention.VMEM_LIMIT_BYTES, "forward", 64 << 10)
  assert aot.main(["--config=tgtree_tiny", "--vocab_size=512", "--config.data.seq_len=128",
                   "--config.train.global_batch=8", "--topology=v5e-8"]) == cli.EXIT_USAGE
  err = [l for l in capsys.readouterr().err.splitlines() if l.startswith("error:")]
  assert len(err) == 1, err
  assert err[0].startswith("error: tgtree_tiny (attention_impl=auto) does not compile for "
                           "--topology=v5e-8: JaxRuntimeError: RESOURCE_EXHAUSTED")
  assert "try --config.model.attention_impl=xla" in err[0]
