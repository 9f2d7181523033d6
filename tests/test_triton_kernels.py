"""The Triton attention kernels (`slm_jax.kernels.triton_kernels`) on CPU, under Triton's
interpreter.

`TRITON_INTERPRET=1` is set below BEFORE triton is imported (`@triton.jit` reads it when a kernel
is decorated), so the kernel bodies run as numpy on torch CPU tensors: no GPU, no jax_triton.
Needs the `triton-test` extra (torch CPU wheel + triton); skipped with the reason otherwise.
Run alone with `pytest -m triton`.

Checked: `tile_mask` equals `structure.attends` (numerically on random metadata for every code,
and textually, expression for expression); forward o and backward dq, dk, dv against
`xla_attention` and `jax.vjp` of it on real packed lin2 rows (several documents per row, continued
documents, padding, ragged T), for every attention code and both hybrids, GQA (G = 1, 2, H),
block plans from the dense mask and from `block_plan.plan_blocks`; the jax wrapper
`triton_attention` end to end (custom_vjp, plan, launch arguments) with jax_triton replaced by a
stand-in that runs the same kernels through `jax.pure_callback`.

Tolerances on max |kernel - reference| (values are O(1), up to ~8): float32 1e-5 absolute for o,
dq, dk, dv (observed ~1e-6); bfloat16 inputs against the bfloat16 XLA reference 1e-2 (o) and
2e-2 (grads) times max(1, max |reference|) (observed: 1 bf16 ulp for o, ≤ 2 ulps for grads).
Both accumulate in float32; summation order and bf16 roundings differ (the interpreter also
truncates float32 → bf16 where the GPU rounds to nearest even).
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported (see docstring)

import functools  # noqa: E402
import importlib  # noqa: E402
import inspect  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import types  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

torch = pytest.importorskip(
    "torch", reason="torch is not installed (pip install -e .[triton-test]: the CPU torch wheel "
    "the Triton interpreter runs on)")
triton = pytest.importorskip(
    "triton", reason="triton is not installed (pip install -e .[triton-test])")

from slm_jax.kernels import launch_profiles, triton_interpret  # noqa: E402
from slm_jax.kernels import triton_kernels as tk  # noqa: E402
from slm_jax.kernels.block_plan import EMPTY, FULL, PARTIAL  # noqa: E402
from slm_jax.kernels.triton_plan import visit_lists  # noqa: E402
from slm_jax.corpus.treebank import generate_documents  # noqa: E402
from slm_jax.data.packing import SentencePacker  # noqa: E402
from slm_jax.kinds import PAD_SYMBOL, Kind  # noqa: E402
from slm_jax.linearize import linearize  # noqa: E402
from slm_jax.model import attention as attention_module  # noqa: E402
from slm_jax.model.attention import xla_attention  # noqa: E402
from slm_jax.structure import (Attention, AttentionSpec, RowMetadata,  # noqa: E402
                               TokenMeta, attends, parse_attention, row_metadata)

pytestmark = pytest.mark.triton

if not isinstance(tk.attention_fwd_kernel, importlib.import_module(
    "triton.runtime.interpreter").InterpretedFunction):
  pytest.skip("the kernels were imported without TRITON_INTERPRET=1 (these tests run them on CPU "
              "torch tensors under Triton's interpreter)", allow_module_level=True)


@pytest.fixture(scope="module", autouse=True)
def _bf16_dot():
  with triton_interpret.bf16_dot():
    yield


# (o, grads): absolute for float32, relative to max(1, max |reference|) for bfloat16 (docstring).
TOLERANCE = {"float32": (1e-5, 1e-5), "bfloat16": (1e-2, 2e-2)}


# --- tile_mask is structure.attends ---------------------------------------------------------------


def _tensor(x: np.ndarray):
  return torch.from_numpy(np.ascontiguousarray(x))


def test_tile_mask_equals_attends_on_random_metadata():
  rng = np.random.default_rng(0)
  bq, bk, tiles = 32, 32, 12
  codes = np.asarray([int(a) for a in Attention], np.int32)
  branches = set()
  for _ in range(tiles):
    # Arbitrary (not necessarily consistent) metadata: every branch of the predicate gets hit.
    q = TokenMeta(rng.integers(0, 40, bq), rng.integers(0, 3, bq), rng.integers(0, 9, bq),
                  rng.integers(0, 44, bq))
    k = TokenMeta(rng.integers(0, 40, bk), rng.integers(0, 3, bk), rng.integers(0, 9, bk),
                  rng.integers(0, 44, bk))
    k = k._replace(pop=np.where(rng.random(bk) < 0.3, q.index[rng.integers(0, bq, bk)], k.pop))
    q, k = (TokenMeta(*(x.astype(np.int32) for x in m)) for m in (q, k))
    out = torch.empty((len(codes), bq, bk), dtype=torch.int8)
    tk.tile_mask_kernel[(len(codes),)](*map(_tensor, (*q, *k, codes)), out, BLOCK_Q=bq,
                                       BLOCK_K=bk)
    query = TokenMeta(*(x[:, None] for x in q))
    key = TokenMeta(*(x[None, :] for x in k))
    for c, code in enumerate(codes):
      expected = attends(query, key, int(code))
      np.testing.assert_array_equal(out[c].numpy().astype(bool), expected,
                                    err_msg=f"tile_mask != attends under code {code}")
      compose = (query.kind == Kind.CNT1) & (code != Attention.CAUSAL)
      branches |= {(int(code), bool(b), bool(v)) for b, v in
                   zip(np.broadcast_to(compose, expected.shape).ravel(), expected.ravel())}
  # Both outcomes, for compose and non-compose queries, under every code (CAUSAL has no compose).
  assert len(branches) == 4 * 4 - 2, sorted(branches)


def _body(fn, renames: dict[str, str]) -> str:
  """The statements after the docstring, comments and whitespace removed, names renamed."""
  source = inspect.getsource(fn).split('"""')[2]
  source = re.sub(r"#[^\n]*", "", source)
  for old, new in renames.items():
    source = re.sub(rf"\b{re.escape(old)}\b", new, source)
  return re.sub(r"\s+", "", source)


def test_tile_mask_is_attends_expression_for_expression():
  fields = ("index", "segment", "kind", "pop")
  renames = {f"{side}.{f}": f"{side[0]}_{f}" for side in ("query", "key") for f in fields}
  renames["attention"] = "code"
  assert _body(tk.tile_mask.fn, {}) == _body(attends, renames)


# --- rows, references, plans ------------------------------------------------------------------


def packed_rows(batch: int, length: int, seed: int) -> RowMetadata:
  """`batch` real packed lin2 rows (several documents, continued documents, padding), numpy."""
  packer = SentencePacker(length, PAD_SYMBOL)
  rows = []
  for document in generate_documents(4 * batch + 4, seed=seed, max_words=6, max_sentences=3):
    rows += list(packer.add(linearize(document, "lin2")))
  rows += list(packer.flush())
  rows = rows[:batch - 1] + rows[-1:]  # the last (flushed) row has the most padding
  assert len(rows) == batch and any((r.segment == 0).any() for r in rows)
  kinds = np.stack([r.kinds for r in rows]).astype(np.int32)
  segment = np.stack([r.segment for r in rows]).astype(np.int32)
  return row_metadata(kinds, segment)


def dense_kinds(meta: RowMetadata, codes_H: np.ndarray, block_q: int, block_k: int):
  """Test-only tile kinds [B, H, NQ, NK] from the dense per-head mask: EMPTY where no pair
  attends, FULL where every pair attends and the tile lies inside the row, else PARTIAL."""
  B, T = meta.kind.shape
  index = np.arange(T)
  field = lambda x, axis: np.expand_dims(np.asarray(x), (1, axis))  # [B, 1, T, 1] / [B, 1, 1, T]
  query = TokenMeta(index[:, None], *(field(x, 3) for x in (meta.segment, meta.kind, meta.pop)))
  key = TokenMeta(index[None, :], *(field(x, 2) for x in (meta.segment, meta.kind, meta.pop)))
  mask_BHTS = attends(query, key, codes_H[None, :, None, None])
  nq, nk = -(-T // block_q), -(-T // block_k)
  padded = np.zeros((B, len(codes_H), nq * block_q, nk * block_k), bool)
  padded[:, :, :T, :T] = mask_BHTS
  tiles = padded.reshape(B, len(codes_H), nq, block_q, nk, block_k)
  return np.where(tiles.all(axis=(3, 5)), FULL,
                  np.where(tiles.any(axis=(3, 5)), PARTIAL, EMPTY)).astype(np.int8)


def dense_plan(meta: RowMetadata, codes_H: np.ndarray, block_q: int, block_k: int):
  """The kernels' visit lists of `dense_kinds`."""
  return visit_lists(dense_kinds(meta, codes_H, block_q, block_k), xp=np)


def library_plan(meta: RowMetadata, codes_H: np.ndarray, block_q: int, block_k: int):
  """The visit lists of `slm_jax.kernels.block_plan`'s plan (rows padded to a multiple of both
  blocks)."""
  bp = pytest.importorskip("slm_jax.kernels.block_plan",
                           reason="slm_jax.kernels.block_plan is not available")
  length = bp.padded_length(meta.kind.shape[-1], block_q, block_k)
  plan = bp.plan_blocks(bp.pad_metadata(meta, length, xp=np), codes_H, block_q, block_k, xp=np)
  return visit_lists(plan.kind_BHIJ, xp=np)


def inputs(meta: RowMetadata, H: int, G: int, K: int, dtype: str, seed: int):
  """q, k, v, do as numpy arrays of `dtype` (bf16 via ml_dtypes)."""
  B, T = meta.kind.shape
  rng = np.random.default_rng(seed)
  shapes = ((B, T, H, K), (B, T, G, K), (B, T, G, K), (B, T, H, K))
  return tuple(rng.normal(size=s).astype(np.float32).astype(getattr(ml_dtypes, dtype)
                                                             if dtype == "bfloat16" else dtype)
               for s in shapes)


def reference(q, k, v, do, meta: RowMetadata, spec):
  """o, dq, dk, dv of `xla_attention` (jax.vjp), as float32 numpy."""
  outputs = _reference(*map(jnp.asarray, (q, k, v, do)), RowMetadata(*map(jnp.asarray, meta)),
                       spec)
  return tuple(np.asarray(x, np.float32) for x in outputs)


@functools.partial(jax.jit, static_argnums=5)
def _reference(q, k, v, do, meta: RowMetadata, spec):
  o, vjp = jax.vjp(lambda q, k, v: xla_attention(q, k, v, meta, spec), q, k, v)
  return (o, *vjp(do))


def _to_numpy(x) -> np.ndarray:
  return x.float().numpy()


def run_kernels(q, k, v, do, meta: RowMetadata, codes_H, plan, block_q: int, block_k: int,
                full_tiles: bool = True):
  """Forward, delta, dq and dk/dv kernels launched on torch CPU tensors with visit lists `plan`
  (their full tiles in a loop of their own if `full_tiles`): float32 numpy o, grads."""
  count, full, kblocks, qcount, qfull, qblocks = (_tensor(np.asarray(x, np.int32)) for x in plan)
  B, T, H, K = q.shape
  G = k.shape[2]
  nq, nk = kblocks.shape[2], qblocks.shape[2]
  q, k, v, do = map(triton_interpret.to_torch, (q, k, v, do))
  segment, kind, pop = (_tensor(np.asarray(x, np.int32)) for x in (meta.segment, meta.kind,
                                                                    meta.pop))
  codes = _tensor(np.asarray(codes_H, np.int32))
  constexprs = dict(T=T, H=H, G=G, BLOCK_Q=block_q, BLOCK_K=block_k, NQ=nq, NK=nk,
                    FULL_TILES=full_tiles, **tk.launch_config(str(q.dtype).removeprefix("torch."), K))
  o, lse = torch.empty_like(q), torch.empty((B, H, T), dtype=torch.float32)
  tk.attention_fwd_kernel[(B * H, nq)](q, k, v, segment, kind, pop, codes, count, full, kblocks,
                                       o, lse, **constexprs)
  delta = (do.float() * o.float()).sum(-1).permute(0, 2, 1).contiguous()
  dq = torch.empty_like(q)
  tk.attention_bwd_dq_kernel[(B * H, nq)](q, k, v, do, lse, delta, segment, kind, pop, codes,
                                          count, full, kblocks, dq, **constexprs)
  dk, dv = torch.empty_like(k), torch.empty_like(v)
  tk.attention_bwd_dkdv_kernel[(B * G, nk)](q, k, v, do, lse, delta, segment, kind, pop, codes,
                                            qcount, qfull, qblocks, dk, dv, **constexprs)
  return tuple(map(_to_numpy, (o, dq, dk, dv)))


def assert_close(got, want, dtype: str, what: str):
  tol_o, tol_grad = TOLERANCE[dtype]
  for name, g, w in zip(("o", "dq", "dk", "dv"), got, want):
    scale = 1.0 if dtype == "float32" else max(1.0, float(np.abs(w).max()))
    error = float(np.abs(g - w).max())
    assert np.isfinite(g).all(), f"{what}: {name} has non-finite values"
    assert error <= (tol_o if name == "o" else tol_grad) * scale, (
        f"{what}: max |{name} - reference| = {error:.3g} (max |reference| "
        f"{float(np.abs(w).max()):.3g})")


# (attention, H, G, block_q, block_k). ALL_CODES gives the 4 heads the 4 codes (one each: one
# launch checks every code); then both hybrids. GQA G = H/2, 1 (heads of two codes share one KV
# head, so dk/dv sum over codes) and H; both block orders and square blocks.
ALL_CODES = AttentionSpec(tuple(Attention))
CASES = [(ALL_CODES, 4, 2, 32, 16), ("mix(tg_nomask,tg)", 2, 1, 16, 32),
         ("mix(causal,tg)", 2, 2, 32, 32)]
H, K, B, T = 4, 16, 2, 100  # T = 100: ragged against every block size


@pytest.fixture(scope="module")
def meta() -> RowMetadata:
  return packed_rows(B, T, seed=3)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("attention,H,G,block_q,block_k", CASES,
                         ids=lambda x: getattr(x, "name", x))
def test_kernels_match_xla_attention_and_its_gradients(meta, attention, H, G, block_q, block_k,
                                                       dtype):
  spec = attention if isinstance(attention, AttentionSpec) else parse_attention(attention)
  codes_H = spec.head_codes(H)
  q, k, v, do = inputs(meta, H, G, K, dtype, seed=block_q + G)
  got = run_kernels(q, k, v, do, meta, codes_H, dense_plan(meta, codes_H, block_q, block_k),
                    block_q, block_k)
  assert_close(got, reference(q, k, v, do, meta, spec), dtype, f"{spec.name} {dtype} H={H} G={G}")


def test_kernels_with_the_block_plan_library_skip_tiles_and_stay_exact(meta):
  """plan_blocks (padded rows: NQ·BLOCK_Q > T) drives the kernels; tiles are really skipped."""
  spec = parse_attention("mix(tg_nomask,tg)")
  codes_H = spec.head_codes(H)
  plan = library_plan(meta, codes_H, 32, 16)
  nq, nk = plan.kblocks_BHIJ.shape[2], plan.qblocks_BHJI.shape[2]
  assert nq * 32 > T and plan.count_BHI.sum() < B * H * nq * nk  # some tiles are not visited
  q, k, v, do = inputs(meta, H, 2, K, "float32", seed=7)
  got = run_kernels(q, k, v, do, meta, codes_H, plan, 32, 16)
  assert_close(got, reference(q, k, v, do, meta, spec), "float32", "plan_blocks")


@pytest.mark.parametrize("full_tiles", [True, False])
def test_full_tiles_go_through_their_own_loop_and_stay_exact(full_tiles):
  """Causal rows of long documents have full tiles (the library plan finds them); the kernels
  visit them unmasked (`full_tiles`) or masked like any tile: both exact."""
  meta = packed_rows(1, 128, seed=2)
  spec = parse_attention("mix(causal,tg)")
  codes_H = spec.head_codes(2)
  plan = library_plan(meta, codes_H, 16, 16)
  assert plan.full_BHI[:, 0].sum() > 0 and plan.qfull_BHJ[:, 0].sum() > 0  # causal head
  assert plan.full_BHI[:, 1].sum() == 0  # TG: a CNT1 in every block, never a full tile
  q, k, v, do = inputs(meta, 2, 1, K, "float32", seed=4)
  got = run_kernels(q, k, v, do, meta, codes_H, plan, 16, 16, full_tiles=full_tiles)
  assert_close(got, reference(q, k, v, do, meta, spec), "float32", f"full tiles {full_tiles}")


def test_a_partial_tile_taken_for_full_is_caught():
  """The full-tile loop really skips the mask: a partial tile listed as full (the diagonal of a
  causal row) lets queries see later keys, and o, dq, dk, dv all move."""
  meta = packed_rows(1, 64, seed=5)
  spec = parse_attention("causal")
  codes_H = spec.head_codes(2)
  kinds = dense_kinds(meta, codes_H, 16, 16)
  diagonal = np.arange(kinds.shape[2])
  assert (kinds[:, :, diagonal, diagonal] == PARTIAL).all()
  kinds[:, :, diagonal, diagonal] = FULL
  q, k, v, do = inputs(meta, 2, 2, K, "float32", seed=1)
  got = run_kernels(q, k, v, do, meta, codes_H, visit_lists(kinds, xp=np), 16, 16)
  want = reference(q, k, v, do, meta, spec)
  for name, g, w in zip(("o", "dq", "dk", "dv"), got, want):
    assert np.abs(g - w).max() > 1e-2, f"{name} did not see the future keys"
  masked = run_kernels(q, k, v, do, meta, codes_H, visit_lists(kinds, xp=np), 16, 16,
                       full_tiles=False)
  assert_close(masked, want, "float32", "the same lists, every tile masked")


def test_an_incomplete_plan_is_caught():
  """The comparison can fail: dropping one non-empty key block of a query block changes o."""
  meta = packed_rows(1, 64, seed=5)
  spec = parse_attention("causal")
  codes_H = spec.head_codes(2)
  plan = dense_plan(meta, codes_H, 16, 16)
  count = plan.count_BHI.copy()
  count[0, :, -1] -= 1  # the last query block forgets its last key block (the diagonal)
  q, k, v, do = inputs(meta, 2, 2, K, "float32", seed=1)
  got = run_kernels(q, k, v, do, meta, codes_H, plan._replace(count_BHI=count), 16, 16)
  with pytest.raises(AssertionError, match="max \\|o - reference\\|"):
    assert_close(got, reference(q, k, v, do, meta, spec), "float32", "incomplete plan")


# --- the jax wrapper, with jax_triton replaced by a pure_callback stand-in ------------------------


@pytest.fixture
def wrapper(monkeypatch):
  """`slm_jax.kernels.triton_attention` imported against the stand-in; registry restored after."""
  pytest.importorskip("slm_jax.kernels.block_plan",
                      reason="slm_jax.kernels.block_plan is not available")
  monkeypatch.setitem(sys.modules, "jax_triton", triton_interpret.stand_in())
  monkeypatch.delitem(sys.modules, "slm_jax.kernels.triton_attention", raising=False)
  monkeypatch.setattr(attention_module, "ATTENTION_KERNELS",
                      dict(attention_module.ATTENTION_KERNELS))
  monkeypatch.setattr(attention_module, "_IMPORT_ERRORS", {})
  module = importlib.import_module("slm_jax.kernels.triton_attention")
  yield module
  sys.modules.pop("slm_jax.kernels.triton_attention", None)
  if hasattr(sys.modules["slm_jax.kernels"], "triton_attention"):
    delattr(sys.modules["slm_jax.kernels"], "triton_attention")


def test_triton_attention_wrapper_matches_xla_attention(wrapper, meta, dtype="float32"):
  assert attention_module.resolve_attention_impl("triton_gpu", "gpu") == "triton_gpu"
  assert attention_module.ATTENTION_KERNELS["triton_gpu"] is wrapper.triton_attention
  spec = parse_attention("mix(causal,tg)")
  q, k, v, do = inputs(meta, H, 2, K, dtype, seed=11)
  jmeta = RowMetadata(*map(jnp.asarray, meta))

  @jax.jit
  def run(q, k, v, do):
    o, vjp = jax.vjp(lambda q, k, v: wrapper.triton_attention(q, k, v, jmeta, spec, block_q=32,
                                                              block_k=16), q, k, v)
    return (o, *vjp(do))

  got = tuple(np.asarray(x, np.float32) for x in run(*map(jnp.asarray, (q, k, v, do))))
  assert_close(got, reference(q, k, v, do, meta, spec), dtype, f"wrapper {dtype}")


def _launches_seen() -> dict:
  """{kernel name: (BLOCK_Q, BLOCK_K, num_warps, CODE)} of the stand-in's launches since the
  last clear."""
  return {name: (constexprs["BLOCK_Q"], constexprs["BLOCK_K"], warps, constexprs["CODE"])
          for name, _, constexprs, warps in triton_interpret.LAUNCHES}


def _expected_launches(launch, T: int, code: int) -> dict:
  fit = lambda b: min(b, max(16, 1 << (T - 1).bit_length()))
  return {f"attention_{name}": (fit(one.block_q), fit(one.block_k), one.num_warps, code)
          for name, one in zip(("fwd_kernel", "bwd_dq_kernel", "bwd_dkdv_kernel"), launch)}


@pytest.mark.slow  # the profile's (large) tiles under the CPU interpreter
@pytest.mark.parametrize("attention,code", [("tg", 1), ("mix(tg_nomask,tg)", -1)])
def test_a_named_profile_tiles_each_kernel_its_own_way(wrapper, meta, attention, code):
  """Profile `lean`: forward, dq and dk/dv each get their own tiles, warps and plan; a single
  attention type reaches the kernels as the CODE constexpr, a hybrid as -1."""
  spec = parse_attention(attention)
  q, k, v, do = inputs(meta, H, 2, K, "float32", seed=5)
  jmeta = RowMetadata(*map(jnp.asarray, meta))
  triton_interpret.LAUNCHES.clear()
  o, vjp = jax.vjp(lambda q, k, v: wrapper.triton_attention(q, k, v, jmeta, spec, launch="lean"),
                   q, k, v)
  got = tuple(np.asarray(x, np.float32) for x in (o, *vjp(jnp.asarray(do))))
  assert_close(got, reference(q, k, v, do, meta, spec), "float32", f"profile lean {attention}")
  seen = _launches_seen()
  assert seen == _expected_launches(launch_profiles.PROFILES["lean"], T, code)
  assert len({(q_, k_) for q_, k_, _, _ in seen.values()}) == 3  # three different tilings


def _grads(wrapper, meta: RowMetadata, spec, seed: int, **kwargs):
  """o, dq, dk, dv of the wrapper under jax.jit (the launch is chosen while tracing), and the
  reference's."""
  q, k, v, do = inputs(meta, 2, 1, K, "float32", seed=seed)
  jmeta = RowMetadata(*map(jnp.asarray, meta))

  @jax.jit
  def run(q, k, v, do):
    o, vjp = jax.vjp(lambda q, k, v: wrapper.triton_attention(q, k, v, jmeta, spec, **kwargs),
                     q, k, v)
    return (o, *vjp(do))

  got = tuple(np.asarray(x, np.float32) for x in run(*map(jnp.asarray, (q, k, v, do))))
  return got, reference(q, k, v, do, meta, spec)


@pytest.fixture
def autotuning(monkeypatch, tmp_path):
  """SLM_TRITON_LAUNCH=autotune on chip sm_90, the cache in tmp_path, nothing remembered."""
  autotune = importlib.import_module("slm_jax.kernels.autotune")
  monkeypatch.setattr(launch_profiles, "_NOTICED", set())
  monkeypatch.setattr(autotune, "_CHOSEN", {})
  monkeypatch.setattr(launch_profiles, "current_chip", lambda: "sm_90")
  monkeypatch.setenv(launch_profiles.ENV_MODE, "autotune")
  monkeypatch.setenv(autotune.ENV_CACHE, str(tmp_path / "cache.json"))
  return autotune


def test_the_chip_table_sets_the_launch_of_training(wrapper, monkeypatch):
  """No launch given (what the model's attention does): the chip's table profile, `old` on
  sm_90 (uniform 32×32 tiles here: blocks shrink to the 32-token rows)."""
  monkeypatch.setattr(launch_profiles, "current_chip", lambda: "sm_90")
  monkeypatch.delenv(launch_profiles.ENV_MODE, raising=False)
  meta = packed_rows(2, 32, seed=1)
  triton_interpret.LAUNCHES.clear()
  got, want = _grads(wrapper, meta, parse_attention("causal"), seed=2)
  assert_close(got, want, "float32", "table launch")
  assert _launches_seen() == _expected_launches(launch_profiles.PROFILES["old"], 32, 0)


def test_autotune_at_first_use_inside_jit_times_caches_and_uses_the_fastest(wrapper,
                                                                           autotuning,
                                                                           monkeypatch,
                                                                           tmp_path):
  """A fake timer makes `lean_split` the fastest: the traced step launches its tiles with the
  full-tile loop, and the cache file holds the choice for the bucket; a second process
  (forget) reads it and times nothing."""
  timed = []

  def fake_measure(bucket, launch):
    name = next(n for n, p in launch_profiles.PROFILES.items() if p == launch)
    timed.append((bucket.key, name))
    return autotuning.Timing(1.0, 1.0 if name == "lean_split" else 5.0)

  monkeypatch.setattr(wrapper, "measure_launch", fake_measure)
  meta = packed_rows(2, 32, seed=1)
  spec = parse_attention("mix(causal,tg)")
  triton_interpret.LAUNCHES.clear()
  got, want = _grads(wrapper, meta, spec, seed=3)
  assert_close(got, want, "float32", "autotuned launch")
  bucket = launch_profiles.Bucket.of(spec.name, 2, 32, 2, 1, K, "float32")
  assert sorted(name for _, name in timed) == sorted(launch_profiles.CANDIDATES)
  assert {key for key, _ in timed} == {bucket.key}
  assert _launches_seen() == _expected_launches(launch_profiles.PROFILES["lean_split"], 32, -1)
  assert all(constexprs["FULL_TILES"] for _, _, constexprs, _ in triton_interpret.LAUNCHES)
  cache = json.loads((tmp_path / "cache.json").read_text())
  assert cache["chip"] == "sm_90" and cache["buckets"][bucket.key]["profile"] == "lean_split"
  autotuning.forget()
  timed.clear()
  assert wrapper.resolve_launch((2, 32, 2, K), (2, 32, 1, K), jnp.float32, spec)[0] == (
      "lean_split")
  assert timed == []


def test_autotune_times_the_real_kernels_while_a_step_is_traced(wrapper, autotuning, monkeypatch,
                                                                tmp_path):
  """The real `measure_launch` (synthetic lin2 rows, jitted forward and forward+backward) runs
  eagerly from inside the jit trace of the first call; two candidates to keep it short."""
  monkeypatch.setattr(launch_profiles, "CANDIDATES", ("old", "lean"))
  meta = packed_rows(2, 32, seed=1)
  got, want = _grads(wrapper, meta, parse_attention("tg"), seed=4)
  assert_close(got, want, "float32", "autotuned with real timings")
  (entry,) = json.loads((tmp_path / "cache.json").read_text())["buckets"].values()
  assert entry["profile"] in ("old", "lean")
  assert all(fwd > 0 and fwd_bwd > 0 for fwd, fwd_bwd in entry["timings_ms"].values())


# --- the kernels compile for a real GPU (no GPU needed) -------------------------------------------


def _run_compiler(code: str, timeout: int) -> str:
  """stdout of `code` run with Triton's real compiler (a subprocess: this process imported the
  kernels interpreted)."""
  env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1"}
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  result = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True,
                          text=True, timeout=timeout, check=False)
  assert result.returncode == 0, f"compile for sm_90 failed:\n{result.stderr[-3000:]}"
  return result.stdout


def test_kernels_compile_to_cuda_binaries_for_sm90():
  """Triton's real compiler (front end → TTGIR → PTX → bundled ptxas) accepts the kernels for
  sm_90 (H100/H200) with bf16 inputs: catches what the interpreter lets through."""
  out = _run_compiler("from slm_jax.kernels import triton_kernels as tk\n"
                      "results = tk.compile_for_gpu(90, 'bfloat16', 64)\n"
                      "for name, result in results.items():\n"
                      "  assert result.cubin_bytes > 0, name\n"
                      "  print(name, result.cubin_bytes, result.shared_bytes)\n", timeout=300)
  assert len(out.splitlines()) == 3, out


def test_triton_aot_compiles_a_profile_for_sm80_and_reports_its_resources():
  """benchmarks/triton_aot.py: the `old` profile for sm_80 (A100), head dim 64 — one row per
  kernel with registers (from cuobjdump), spill stores, stack and shared memory within the
  target's limit."""
  env = {**os.environ, "TRITON_DEFAULT_FP_FUSION": "1"}
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  done = subprocess.run([sys.executable, "benchmarks/triton_aot.py", "--profiles", "old",
                         "--archs", "80", "--head-dims", "64", "--attentions", "tg"], env=env,
                        cwd=root, capture_output=True, text=True, timeout=300, check=False)
  assert done.returncode == 0, done.stdout + done.stderr[-3000:]
  rows = [[cell.strip() for cell in line.strip("|").split("|")]
          for line in done.stdout.splitlines() if line.startswith("| old ")]
  assert [row[4] for row in rows] == ["fwd", "dq", "dkdv"]
  for row in rows:
    registers, spills, stack, shared = int(row[6]), int(row[7]), int(row[8]), float(row[9])
    assert 0 < registers <= 255 and spills >= 0 and stack >= 0 and shared > 0, row
    assert row[10] == "yes", row


@pytest.mark.slow  # compiles to sm_90 SASS
def test_the_lean_profile_compiles_to_warpgroup_mma_with_few_register_spills():
  """Profile `lean` (per-kernel tiles) compiles for sm_90, bf16, head dim 128: no local-memory
  stores in the SASS for one attention type (CODE constexpr), at most a handful in dk/dv for
  hybrids (CODE = -1, the mask is not folded); far more with 64×64 tiles and 4 warps for all
  three kernels (profile `old`)."""
  out = _run_compiler(
      "import json\n"
      "from slm_jax.kernels import launch_profiles, triton_kernels as tk\n"
      "spills = lambda r: [one.spill_stores for one in r.values()]  # fwd, dq, dkdv\n"
      "lean = launch_profiles.PROFILES['lean']\n"
      "print(json.dumps([spills(tk.compile_for_gpu(90, 'bfloat16', 128, code=code,\n"
      "                                           launch=lean)) for code in (1, -1)]\n"
      "                 + [spills(tk.compile_for_gpu(90, 'bfloat16', 128, block=64))]))\n",
      timeout=600)
  single, hybrid, old = json.loads(out)
  if -1 in single + hybrid + old:
    pytest.skip("Triton produced no SASS (nvdisasm missing): spills cannot be counted")
  assert single == [0, 0, 0]
  assert hybrid[:2] == [0, 0] and hybrid[2] <= 16
  assert all(o > 10 * max(h, 1) for o, h in zip(old[1:], hybrid[1:]))


def test_missing_tma_tf32_is_defined_only_when_absent(wrapper, monkeypatch):
  """jax-triton 0.4 + Triton 3.6: the shim adds Triton 3.7's TMA_TF32, and never overrides one."""
  from triton.backends import nvidia  # pylint: disable=g-import-not-at-top
  old_driver = types.ModuleType("triton.backends.nvidia.driver")  # a Triton 3.6 driver module
  monkeypatch.setitem(sys.modules, "triton.backends.nvidia.driver", old_driver)
  monkeypatch.setattr(nvidia, "driver", old_driver, raising=False)
  assert wrapper._define_missing_tma_tf32()
  assert old_driver.TMA_TF32 == 11
  old_driver.TMA_TF32 = 7
  assert not wrapper._define_missing_tma_tf32()
  assert old_driver.TMA_TF32 == 7
