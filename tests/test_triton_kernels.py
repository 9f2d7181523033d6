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

from slm_jax.kernels import triton_kernels as tk  # noqa: E402
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


def _interpreter_dot_in_float32(create_dot):
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


@pytest.fixture(scope="module", autouse=True)
def _bf16_dot():
  builder = importlib.import_module("triton.runtime.interpreter").InterpreterBuilder
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(builder, "create_dot", _interpreter_dot_in_float32(builder.create_dot))
    yield


TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
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


def dense_plan(meta: RowMetadata, codes_H: np.ndarray, block_q: int, block_k: int):
  """Test-only plan from the dense per-head mask: (count, kblocks, qcount, qblocks)."""
  B, T = meta.kind.shape
  index = np.arange(T)
  field = lambda x, axis: np.expand_dims(np.asarray(x), (1, axis))  # [B, 1, T, 1] / [B, 1, 1, T]
  query = TokenMeta(index[:, None], *(field(x, 3) for x in (meta.segment, meta.kind, meta.pop)))
  key = TokenMeta(index[None, :], *(field(x, 2) for x in (meta.segment, meta.kind, meta.pop)))
  mask_BHTS = attends(query, key, codes_H[None, :, None, None])
  nq, nk = -(-T // block_q), -(-T // block_k)
  padded = np.zeros((B, len(codes_H), nq * block_q, nk * block_k), bool)
  padded[:, :, :T, :T] = mask_BHTS
  visit = padded.reshape(B, len(codes_H), nq, block_q, nk, block_k).any(axis=(3, 5))
  lists = lambda v: (v.sum(-1).astype(np.int32),
                     np.argsort(~v, axis=-1, kind="stable").astype(np.int32))
  return (*lists(visit), *lists(visit.swapaxes(-1, -2)))


def library_plan(meta: RowMetadata, codes_H: np.ndarray, block_q: int, block_k: int):
  """The plan of `slm_jax.kernels.block_plan` (rows padded to a multiple of both blocks)."""
  bp = pytest.importorskip("slm_jax.kernels.block_plan",
                           reason="slm_jax.kernels.block_plan is not available")
  length = bp.padded_length(meta.kind.shape[-1], block_q, block_k)
  plan = bp.plan_blocks(bp.pad_metadata(meta, length, xp=np), codes_H, block_q, block_k, xp=np)
  return tuple(np.asarray(x, np.int32) for x in plan[1:])


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


def _to_torch(x: np.ndarray):
  if x.dtype == ml_dtypes.bfloat16:
    return _tensor(x.view(np.uint16)).view(torch.bfloat16)
  return _tensor(x)


def _to_numpy(x) -> np.ndarray:
  return x.float().numpy()


def run_kernels(q, k, v, do, meta: RowMetadata, codes_H, plan, block_q: int, block_k: int):
  """Forward, delta, dq and dk/dv kernels launched on torch CPU tensors: float32 numpy o, grads."""
  count, kblocks, qcount, qblocks = map(_tensor, plan)
  B, T, H, K = q.shape
  G = k.shape[2]
  nq, nk = kblocks.shape[2], qblocks.shape[2]
  q, k, v, do = map(_to_torch, (q, k, v, do))
  segment, kind, pop = (_tensor(np.asarray(x, np.int32)) for x in (meta.segment, meta.kind,
                                                                    meta.pop))
  codes = _tensor(np.asarray(codes_H, np.int32))
  constexprs = dict(T=T, H=H, G=G, BLOCK_Q=block_q, BLOCK_K=block_k, NQ=nq, NK=nk,
                    **tk.launch_config(str(q.dtype).removeprefix("torch."), K))
  o, lse = torch.empty_like(q), torch.empty((B, H, T), dtype=torch.float32)
  tk.attention_fwd_kernel[(B * H, nq)](q, k, v, segment, kind, pop, codes, count, kblocks, o,
                                       lse, **constexprs)
  delta = (do.float() * o.float()).sum(-1).permute(0, 2, 1).contiguous()
  dq = torch.empty_like(q)
  tk.attention_bwd_dq_kernel[(B * H, nq)](q, k, v, do, lse, delta, segment, kind, pop, codes,
                                          count, kblocks, dq, **constexprs)
  dk, dv = torch.empty_like(k), torch.empty_like(v)
  tk.attention_bwd_dkdv_kernel[(B * G, nk)](q, k, v, do, lse, delta, segment, kind, pop, codes,
                                            qcount, qblocks, dk, dv, **constexprs)
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
  nq, nk = plan[1].shape[2], plan[3].shape[2]
  assert nq * 32 > T and plan[0].sum() < B * H * nq * nk  # some tiles are not visited
  q, k, v, do = inputs(meta, H, 2, K, "float32", seed=7)
  got = run_kernels(q, k, v, do, meta, codes_H, plan, 32, 16)
  assert_close(got, reference(q, k, v, do, meta, spec), "float32", "plan_blocks")


def test_an_incomplete_plan_is_caught():
  """The comparison can fail: dropping one non-empty key block of a query block changes o."""
  meta = packed_rows(1, 64, seed=5)
  spec = parse_attention("causal")
  codes_H = spec.head_codes(2)
  count, kblocks, qcount, qblocks = dense_plan(meta, codes_H, 16, 16)
  count = count.copy()
  count[0, :, -1] -= 1  # the last query block forgets its last key block (the diagonal)
  q, k, v, do = inputs(meta, 2, 2, K, "float32", seed=1)
  got = run_kernels(q, k, v, do, meta, codes_H, (count, kblocks, qcount, qblocks), 16, 16)
  with pytest.raises(AssertionError, match="max \\|o - reference\\|"):
    assert_close(got, reference(q, k, v, do, meta, spec), "float32", "incomplete plan")


# --- the jax wrapper, with jax_triton replaced by a pure_callback stand-in ------------------------


LAUNCHES: list = []


def _stand_in_triton_call(*args, kernel, grid, out_type=None, num_warps=None, num_stages=None,
                          **kwargs):
  """jax_triton.triton_call's contract: array args, then one pointer per output; kwargs are
  constexprs. Runs the kernel under the interpreter on the host through jax.pure_callback.
  Records (kernel name, grid, constexprs, num_warps) of every launch in LAUNCHES."""
  LAUNCHES.append((kernel.fn.__name__, grid, dict(kwargs), num_warps))
  del num_stages
  outs = out_type if out_type is not None else kwargs.pop("out_shape")
  single = not isinstance(outs, (tuple, list))
  outs = (outs,) if single else tuple(outs)

  def host(*arrays):
    tensors = [_to_torch(np.array(a)) for a in arrays]  # writable copies
    results = [torch.empty(o.shape, dtype=TORCH_DTYPES.get(jnp.dtype(o.dtype).name,
                                                           torch.float32)) for o in outs]
    kernel[grid](*tensors, *results, **kwargs)
    return tuple(np.asarray(r.float().numpy()).astype(o.dtype) for r, o in zip(results, outs))

  results = jax.pure_callback(host, outs, *args)
  return results[0] if single else results


@pytest.fixture
def wrapper(monkeypatch):
  """`slm_jax.kernels.triton_attention` imported against the stand-in; registry restored after."""
  pytest.importorskip("slm_jax.kernels.block_plan",
                      reason="slm_jax.kernels.block_plan is not available")
  stand_in = types.ModuleType("jax_triton")
  stand_in.triton_call = _stand_in_triton_call
  monkeypatch.setitem(sys.modules, "jax_triton", stand_in)
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


@pytest.mark.slow  # the default (large) tiles under the CPU interpreter
@pytest.mark.parametrize("attention,code", [("tg", 1), ("mix(tg_nomask,tg)", -1)])
def test_default_launch_tiles_each_kernel_its_own_way(wrapper, meta, attention, code):
  """Default `TritonLaunch`: forward, dq and dk/dv each get their own tiles, warps and plan;
  a single attention type reaches the kernels as the CODE constexpr, a hybrid as -1."""
  spec = parse_attention(attention)
  q, k, v, do = inputs(meta, H, 2, K, "float32", seed=5)
  jmeta = RowMetadata(*map(jnp.asarray, meta))
  LAUNCHES.clear()
  o, vjp = jax.vjp(lambda q, k, v: wrapper.triton_attention(q, k, v, jmeta, spec), q, k, v)
  got = tuple(np.asarray(x, np.float32) for x in (o, *vjp(jnp.asarray(do))))
  assert_close(got, reference(q, k, v, do, meta, spec), "float32", f"default launch {attention}")
  launch = wrapper.TritonLaunch()
  seen = {name: (constexprs["BLOCK_Q"], constexprs["BLOCK_K"], warps, constexprs["CODE"])
          for name, _, constexprs, warps in LAUNCHES}
  T = meta.kind.shape[-1]
  fit = lambda b: min(b, max(16, 1 << (T - 1).bit_length()))
  assert seen == {
      f"attention_{name}": (fit(one.block_q), fit(one.block_k), one.num_warps, code)
      for name, one in zip(("fwd_kernel", "bwd_dq_kernel", "bwd_dkdv_kernel"), launch)}
  assert len({(q_, k_) for q_, k_, _, _ in seen.values()}) == 3  # three different tilings


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
                      "for name, (cubin, shared, _) in results.items():\n"
                      "  assert cubin > 0, name\n"
                      "  print(name, cubin, shared)\n", timeout=300)
  assert len(out.splitlines()) == 3, out


@pytest.mark.slow  # compiles to sm_90 SASS
def test_default_launch_compiles_to_warpgroup_mma_with_few_register_spills():
  """The default `TritonLaunch` (per-kernel tiles) compiles for sm_90, bf16, head dim 128: no
  local-memory stores in the SASS for one attention type (CODE constexpr), at most a handful in
  dk/dv for hybrids (CODE = -1, the mask is not folded); far more with 64×64 tiles and 4 warps
  for all three kernels (the old default)."""
  out = _run_compiler(
      "import json\n"
      "from slm_jax.kernels import triton_kernels as tk\n"
      "spills = lambda r: [s for _, _, s in r.values()]  # fwd, dq, dkdv\n"
      "print(json.dumps([spills(tk.compile_for_gpu(90, 'bfloat16', 128, code=code,\n"
      "                                           launch=tk.TritonLaunch())) for code in (1, -1)]\n"
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
