"""GTCA's branch (SPEC §10): causality of the chunk mask (values and gradients, and the reference
code's inverted mask caught by the same checks), exact zeros for tokens that see no chunk, α = 0
leaving the decoder bitwise unchanged (and the model without a branch being the decoder), α per
row, the gate ≡ 1 and m ≡ 1 ablations, GQA ≡ MHA with repeated K/V, and a frozen-backbone train
step (`train.steps.make_train_step` on a `GtcaLM`) that changes the branch only (bitwise)."""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from slm_jax.gtca.branch import ChunkMemory, Gtca, GtcaConfig, parameter_counts, span_means
from slm_jax.gtca.model import GtcaLM, changed_arrays, params_of
from slm_jax.hf.scoring import plain_rows
from slm_jax.model import Decoder, ModelConfig
from slm_jax.train.optimizer import OptimizerSection, make_optimizer, trainable_mask
from slm_jax.train.steps import make_train_step

VOCAB, B, T, K = 50, 2, 12, 64


class Chunks(NamedTuple):
  """Stand-in for `slm_jax.gtca.spans.ChunkBatch` (same four fields)."""

  start_BLK: np.ndarray
  end_BLK: np.ndarray
  last_BLK: np.ndarray
  update_mask_BT: np.ndarray


def model_config(**overrides) -> ModelConfig:
  fields = dict(vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                compute_dtype=jnp.float32, init_std=0.2, attention_impl="xla")
  return ModelConfig(**{**fields, **overrides})


def make_chunks(seed: int = 0, n_layers: int = 2, per_layer: int = 7, length: int = T,
                batch: int = B) -> Chunks:
  """Random spans (ends spread over the whole row), the rest padding; m = 0 on a few tokens."""
  rng = np.random.default_rng(seed)
  start = np.zeros((batch, n_layers, K), np.int32)
  end = np.zeros((batch, n_layers, K), np.int32)
  for b in range(batch):
    for l in range(n_layers):
      for n in range(per_layer):
        s = int(rng.integers(0, length))
        start[b, l, n], end[b, l, n] = s, int(rng.integers(s + 1, length + 1))
  last = np.where(end > start, end - 1, -1).astype(np.int32)
  mask = np.ones((batch, length), np.float32)
  mask[:, 3:5] = 0.0
  return Chunks(start, end, last, mask)


@functools.lru_cache(maxsize=None)
def _built(seed: int, gtca_cls, options: tuple, lora_rank: int):
  mconfig = model_config(lora_rank=lora_rank)
  decoder = Decoder(mconfig, rngs=nnx.Rngs(seed))
  config = GtcaConfig.from_model(mconfig, **{"init_std": 0.3, **dict(options)})
  gtca = gtca_cls(config, rngs=nnx.Rngs(seed + 1))
  if gtca.gate_b is not None:  # gates that differ per head
    gtca.gate_b[...] = jax.random.normal(jax.random.key(seed + 2), gtca.gate_b.shape)
  return decoder, gtca


def models(seed: int = 0, gtca_cls=Gtca, lora_rank: int = 0, **options):
  """Fresh copies of a tiny decoder and branch (built once per argument set: eager model
  construction dominates these tests' time)."""
  decoder, gtca = _built(seed, gtca_cls, tuple(sorted(options.items())), lora_rank)
  return nnx.clone(decoder), nnx.clone(gtca)


def rows(seed: int = 0, length: int = T):
  ids = np.random.default_rng(seed).integers(1, VOCAB, (B, length))
  tokens, meta = plain_rows(list(ids), length, B)
  return jnp.asarray(tokens), jax.tree.map(jnp.asarray, meta)


class InvertedGtca(Gtca):
  """The public reference code's defect: tokens see only chunks that end AFTER them."""

  def visible(self, last_BK, length):
    t_1T1 = jnp.arange(length, dtype=jnp.int32)[None, :, None]
    last_B1K = last_BK[:, None, :]
    return (last_B1K >= 0) & (last_B1K > t_1T1)


@jax.jit
def _probe(decoder, gtca, tokens_BT, meta, chunks, w_BTD):
  """(logits [B, T, V], later-position gradients [T, B, S, D]): row t of the second is
  |∂ <w, hidden[:, t]> / ∂ x[:, s]| (a vmapped VJP), zeroed where s ≤ t. The input embeddings
  x feed both the backbone and the chunk memories."""
  model = GtcaLM(decoder, gtca)
  h_BTD, vjp = jax.vjp(lambda x: model.hidden(x, meta, chunks, 0.7), decoder.embed(tokens_BT))
  at_TBTD = w_BTD[None] * jnp.eye(T, dtype=w_BTD.dtype)[:, None, :, None]
  grads_TBSD = jax.vmap(lambda ct: vjp(ct)[0])(at_TBTD)
  later_TS = jnp.arange(T)[None, :] > jnp.arange(T)[:, None]
  return decoder.logits(h_BTD), jnp.where(later_TS[:, None, :, None], jnp.abs(grads_TBSD), 0.0)


@functools.lru_cache(maxsize=None)
def leaks(gtca_cls, sharing: str = "per_layer") -> tuple[float, float]:
  """(value leak, gradient leak) of the tiny decoder with a `gtca_cls` branch (cross-attention
  per layer, or `sharing="shared"`).

  Value: max |Δ logits[:, :t+1]| when every token after t and every chunk with r_n > t change
  (start, end and r_n moved), over t ∈ {0, 3, 7, T−2}. Gradient: max |∂ hidden[:, t] / ∂ x[:, s]|
  over s > t, every t."""
  decoder, gtca = models(gtca_cls=gtca_cls, cross_attention=sharing)
  tokens, meta = rows(0)
  chunks = make_chunks(0)
  w_BTD = jax.random.normal(jax.random.key(5), (B, T, 32))
  before, later = _probe(decoder, gtca, tokens, meta, chunks, w_BTD)
  other = rows(1)[0]
  value = 0.0
  for t in (0, 3, 7, T - 2):
    tokens2 = jnp.where(jnp.arange(T)[None] > t, other, tokens)
    future = chunks.last_BLK > t
    chunks2 = Chunks(
        np.where(future, np.minimum(chunks.start_BLK + 1, chunks.last_BLK), chunks.start_BLK),
        np.where(future, T, chunks.end_BLK), np.where(future, T - 1, chunks.last_BLK),
        chunks.update_mask_BT)
    chunks2 = Chunks(*(x.astype(np.int32) for x in chunks2[:3]), chunks.update_mask_BT)
    after, _ = _probe(decoder, gtca, tokens2, meta, chunks2, w_BTD)
    value = max(value, float(jnp.abs(after[:, :t + 1] - before[:, :t + 1]).max()))
  return value, float(later.max())


SHARING = ("per_layer", "shared")


@pytest.mark.parametrize("sharing", SHARING)
def test_causal_mask_values_do_not_see_the_future(sharing):
  assert leaks(Gtca, sharing)[0] == 0.0


@pytest.mark.parametrize("sharing", SHARING)
def test_causal_mask_gradients_do_not_reach_the_future(sharing):
  assert leaks(Gtca, sharing)[1] == 0.0


@pytest.mark.parametrize("sharing", SHARING)
def test_inverted_reference_mask_is_caught(sharing):
  value, gradient = leaks(InvertedGtca, sharing)
  assert value > 1e-4 and gradient > 1e-6


@jax.jit
def _zero_probe(gtca, x_BTD, chunks):
  """(memories, δ of both layers at α = 1, gradients of Σ δ² w.r.t. the branch)."""
  def loss(g):
    memory = g.memories(x_BTD, chunks)
    deltas = jnp.stack([g.delta(layer, x_BTD, memory, 1.0) for layer in range(2)])
    return jnp.sum(deltas ** 2), (memory.c_BLKD, deltas)
  (_, (c_BLKD, deltas)), grads = jax.value_and_grad(loss, has_aux=True)(gtca)
  return c_BLKD, deltas, grads


@pytest.mark.parametrize("sharing", SHARING)
def test_token_that_sees_no_chunk_gets_exact_zero(sharing):
  _, gtca = models(cross_attention=sharing)
  rng = np.random.default_rng(3)
  start = np.zeros((B, 2, K), np.int32)
  end = np.zeros((B, 2, K), np.int32)
  start[0, :, :3], end[0, :, :3] = 4, [6, 9, 12]  # row 0: first chunk ends at r = 5
  last = np.where(end > start, end - 1, -1).astype(np.int32)  # row 1: all padding
  chunks = Chunks(start, end, last, np.ones((B, T), np.float32))
  x_BTD = jnp.asarray(rng.normal(size=(B, T, 32)), jnp.float32)
  c_BLKD, deltas, grads = jax.tree.map(np.asarray, _zero_probe(gtca, x_BTD, chunks))
  assert np.isfinite(c_BLKD).all() and np.isfinite(deltas).all()
  for delta in deltas:
    zero = np.zeros_like(delta[0, :5])
    assert delta[0, :5].tobytes() == zero.tobytes()  # bitwise +0.0, not -0.0 or ~1e-38
    assert delta[1].tobytes() == np.zeros_like(delta[1]).tobytes()
    assert (np.abs(delta[0, 5:]).sum(-1) > 0).all()
  assert all(np.isfinite(leaf).all() for leaf in jax.tree.leaves(nnx.state(grads)))


@pytest.mark.parametrize("sharing", SHARING)
def test_alpha_zero_leaves_the_decoder_bitwise_unchanged(sharing):
  decoder, gtca = models(cross_attention=sharing)
  tokens, meta = rows(0)
  chunks = make_chunks(0)
  assert gtca.config.alpha == 0.0  # the default, not the reference code's 1.0
  plain = np.asarray(jax.jit(lambda d: d(tokens, meta))(decoder))
  branch = jax.jit(lambda d, g, a: GtcaLM(d, g).logits(tokens, meta, chunks, a))
  assert np.asarray(branch(decoder, gtca, 0.0)).tobytes() == plain.tobytes()
  half = np.asarray(branch(decoder, gtca, 0.5))
  assert np.abs(half - plain).max() > 1e-4
  # α as a per-row field (a training batch's): the same bits as the scalar
  rows_alpha = np.asarray(branch(decoder, gtca, jnp.full((B,), 0.5, jnp.float32)))
  assert rows_alpha.tobytes() == half.tobytes()
  mixed = np.asarray(branch(decoder, gtca, jnp.asarray([0.0, 0.5], jnp.float32)))
  assert mixed[0].tobytes() == plain[0].tobytes() and mixed[1].tobytes() == half[1].tobytes()


def test_the_model_without_a_branch_is_the_decoder_bitwise():
  decoder, _ = models()
  tokens, meta = rows(0)
  plain = np.asarray(jax.jit(lambda d: d(tokens, meta))(decoder))
  alone = np.asarray(jax.jit(lambda d: GtcaLM(d).logits(tokens, meta))(decoder))
  assert alone.tobytes() == plain.tobytes()
  batch = {"tokens": tokens, "meta": meta, "targets": jnp.ones((B, T), bool)}
  want = jax.jit(lambda d: d.loss_sums(batch))(decoder)
  got = jax.jit(lambda d: GtcaLM(d).loss_sums(batch))(decoder)
  assert jax.tree.map(lambda a, b: np.asarray(a).tobytes() == np.asarray(b).tobytes(),
                      got, want) == jax.tree.map(lambda _: True, want)


def _copy_params(src: Gtca, dst: Gtca,
                 names=("chunk_proj", "chunk_norm_scale", "chunk_norm_bias", "q", "k", "v", "o")):
  for name in names:
    getattr(dst, name)[...] = getattr(src, name)[...]


def test_gate_one_ablation():
  _, learned = models()
  _, one = models(gate="one")
  assert one.gate_w is None and one.gate_b is None  # nothing to train that does nothing
  _copy_params(learned, one)
  learned.gate_w[...] = jnp.zeros_like(learned.gate_w[...])
  learned.gate_b[...] = jnp.zeros_like(learned.gate_b[...])  # g = σ(0) = 1/2 exactly
  x_BTD = jnp.asarray(np.random.default_rng(0).normal(size=(B, T, 32)), jnp.float32)
  chunks = make_chunks(0)
  d_one = one.delta(1, x_BTD, one.memories(x_BTD, chunks), 0.3)
  d_half = learned.delta(1, x_BTD, learned.memories(x_BTD, chunks), 0.3)
  np.testing.assert_array_equal(np.asarray(d_half), np.asarray(0.5 * d_one))
  assert np.abs(np.asarray(d_one)).max() > 0


def test_update_mask_and_its_ablation():
  _, masked = models()
  _, unmasked = models(use_update_mask=False)
  x_BTD = jnp.asarray(np.random.default_rng(0).normal(size=(B, T, 32)), jnp.float32)
  chunks = make_chunks(0)
  ones = chunks._replace(update_mask_BT=np.ones((B, T), np.float32))
  d_masked = np.asarray(masked.delta(0, x_BTD, masked.memories(x_BTD, chunks), 0.5))
  d_full = np.asarray(masked.delta(0, x_BTD, masked.memories(x_BTD, ones), 0.5))
  d_ablated = np.asarray(unmasked.delta(0, x_BTD, unmasked.memories(x_BTD, chunks), 0.5))
  off = chunks.update_mask_BT == 0
  assert (d_masked[off] == 0).all() and np.abs(d_full[off]).max() > 0
  np.testing.assert_array_equal(d_masked[~off], d_full[~off])
  np.testing.assert_array_equal(d_ablated, d_full)  # m ≡ 1


def test_gqa_equals_mha_with_repeated_kv():
  _, gqa = models()  # H = 4 query heads over G = 2 KV heads
  config = gqa.config
  mha = Gtca(GtcaConfig.from_model(model_config(n_kv_heads=4)), rngs=nnx.Rngs(9))
  _copy_params(gqa, mha, ("chunk_proj", "chunk_norm_scale", "chunk_norm_bias", "q", "o"))
  mha.gate_w[...], mha.gate_b[...] = gqa.gate_w[...], gqa.gate_b[...]
  R, E = config.n_heads // config.n_kv_heads, config.head_dim
  X = config.n_layers  # one set per layer
  for name in ("k", "v"):
    w_XDGE = getattr(gqa, name)[...].reshape(X, 32, config.n_kv_heads, E)
    getattr(mha, name)[...] = jnp.repeat(w_XDGE, R, axis=2).reshape(X, 32, config.n_heads * E)
  x_BTD = jnp.asarray(np.random.default_rng(0).normal(size=(B, T, 32)), jnp.float32)
  chunks = make_chunks(0)
  d_gqa = gqa.delta(0, x_BTD, gqa.memories(x_BTD, chunks), 0.5)
  d_mha = mha.delta(0, x_BTD, mha.memories(x_BTD, chunks), 0.5)
  np.testing.assert_allclose(np.asarray(d_gqa), np.asarray(d_mha), rtol=1e-5, atol=1e-6)
  # Tiling instead of repeating (head h reading KV head h % G) is a different model.
  for name in ("k", "v"):
    w_XDGE = getattr(gqa, name)[...].reshape(X, 32, config.n_kv_heads, E)
    getattr(mha, name)[...] = jnp.tile(w_XDGE, (1, 1, R, 1)).reshape(X, 32, config.n_heads * E)
  d_tiled = mha.delta(0, x_BTD, mha.memories(x_BTD, chunks), 0.5)
  assert np.abs(np.asarray(d_tiled) - np.asarray(d_gqa)).max() > 1e-4


def test_span_means_and_shape_errors():
  x_BTD = jnp.asarray(np.random.default_rng(0).normal(size=(B, T, 32)), jnp.float32)
  chunks = make_chunks(0)
  means = np.asarray(span_means(x_BTD, chunks.start_BLK, chunks.end_BLK))
  x = np.asarray(x_BTD)
  for b, l, n in [(0, 0, 0), (1, 1, 3), (0, 1, 6)]:
    s, e = chunks.start_BLK[b, l, n], chunks.end_BLK[b, l, n]
    np.testing.assert_allclose(means[b, l, n], x[b, s:e].mean(0), rtol=1e-5, atol=1e-5)
  assert (means[:, :, 7:] == 0).all()  # padding: 0, not NaN
  _, gtca = models()
  short = chunks._replace(last_BLK=np.where(chunks.last_BLK >= 0, chunks.start_BLK, 5)
                          .astype(np.int32))  # r_n below end − 1, and padding with r = 5
  np.testing.assert_array_equal(np.asarray(gtca.memories(x_BTD, short).last_BLK),
                                chunks.last_BLK)  # boundaries from the spans: nothing leaks
  with pytest.raises(ValueError, match="last_BLK has shape"):
    gtca.memories(x_BTD, chunks._replace(last_BLK=chunks.last_BLK[:, :, :8]))
  with pytest.raises(ValueError, match="update_mask_BT"):
    gtca.memories(x_BTD, chunks._replace(update_mask_BT=chunks.update_mask_BT[:, :5]))
  decoder = Decoder(model_config(n_layers=1), rngs=nnx.Rngs(0))
  with pytest.raises(ValueError, match="n_layers: backbone 1, branch 2"):
    GtcaLM(decoder, gtca)
  with pytest.raises(ValueError, match="gate"):
    GtcaConfig.from_model(model_config(), gate="none")


def test_per_layer_cross_attention_has_one_set_per_layer():
  _, shared = models(cross_attention="shared")
  _, per_layer = models()  # the default, as the reference builds it
  assert per_layer.config.cross_attention == "per_layer"
  assert shared.q.shape == (1, 32, 32) and per_layer.q.shape == (2, 32, 32)
  # parameter counts: L× the cross-attention parameters, the same chunk encoder; and the
  # counts are the arrays' sizes
  mine, theirs = parameter_counts(per_layer.config), parameter_counts(shared.config)
  assert mine["cross_attention"] == 2 * theirs["cross_attention"] > 0
  assert mine["chunk"] == theirs["chunk"]
  for gtca, counts in ((per_layer, mine), (shared, theirs)):
    sizes = {path: leaf.size for path, leaf in
             jax.tree_util.tree_flatten_with_path(nnx.to_pure_dict(nnx.state(gtca, nnx.Param)))[0]}
    chunk = sum(n for p, n in sizes.items() if "chunk" in jax.tree_util.keystr(p))
    assert chunk == counts["chunk"] and sum(sizes.values()) == counts["total"]
  x_BTD = jnp.asarray(np.random.default_rng(0).normal(size=(B, T, 32)), jnp.float32)
  memory = per_layer.memories(x_BTD, make_chunks(0))
  same = ChunkMemory(memory.c_BLKD[:, :1].repeat(2, 1), memory.last_BLK[:, :1].repeat(2, 1),
                     memory.update_mask_BT)  # both layers read the same chunks
  d0, d1 = (np.asarray(per_layer.delta(l, x_BTD, same, 1.0)) for l in (0, 1))
  assert np.abs(d0 - d1).max() > 1e-4


def test_a_run_builds_per_layer_cross_attention_unless_shared_is_asked():
  from types import SimpleNamespace
  from slm_jax.gtca.plans import Settings
  from slm_jax.gtca.runs import make_model
  decoder, _ = models()
  backbone = SimpleNamespace(decoder=decoder)
  built = lambda **kw: make_model(backbone, Settings(backbone="b", out="o", **kw)).gtca.config
  assert built().cross_attention == "per_layer"
  assert built(shared_cross_attention=True).cross_attention == "shared"


def test_train_step_changes_only_the_branch():
  decoder, gtca = models(lora_rank=4)  # stage 2: LoRA adapters frozen with the backbone
  graphdef, params = params_of(GtcaLM(decoder, gtca))
  params = jax.tree.map(jnp.array, params)  # own buffers: the step donates its parameters
  before = jax.tree.map(np.array, params)
  everything = set(changed_arrays(before, jax.tree.map(lambda x: x + 1, before)))
  gtca_paths = {p for p in everything if p.startswith("gtca/")}
  lora_paths = {p for p in everything if p.rsplit("/", 1)[-1] in ("lora_a", "lora_b")}
  assert gtca_paths and lora_paths
  selected = lambda trainable: {p for p, m in zip(sorted(everything), _flat_mask(
      trainable_mask(params, trainable))) if m}
  assert selected("lora,gtca") == gtca_paths | lora_paths  # stage 3's selection
  assert selected("gtca") == gtca_paths
  assert selected("lora") == lora_paths
  section = OptimizerSection(peak_lr=3e-2, min_lr=3e-2, warmup_steps=0, warmup_start_lr=0.0,
                             weight_decay=0.0, b1=0.9, b2=0.999, eps=1e-8, clip=0.0,
                             grad_accum_steps=1, trainable="gtca")
  tx = make_optimizer(section, 6, accumulate=False)
  opt_state = tx.init(params)
  step = make_train_step(graphdef, tx, 1, trainable="gtca")
  tokens, meta = rows(0)
  batch = {"tokens": tokens, "meta": meta, "targets": jnp.ones((B, T), bool),
           "chunks": jax.tree.map(jnp.asarray, make_chunks(0)),
           "alpha": jnp.full((B,), 0.5, jnp.float32)}
  losses = []
  for _ in range(6):
    params, opt_state, sums = step(params, opt_state, batch)
    losses.append(float(sums["loss_sum"] / sums["count"]))
  changed = set(changed_arrays(before, params))
  assert changed == gtca_paths, sorted(changed ^ gtca_paths)[:5]  # every branch array moved
  assert losses[-1] < losses[0] - 0.05, losses
  with pytest.raises(ValueError, match="no alpha"):  # never silently at the config's α
    GtcaLM(decoder, gtca).loss_sums({k: v for k, v in batch.items() if k != "alpha"})


def _flat_mask(mask) -> list[bool]:
  """The mask's leaves in sorted path order (as `changed_arrays` sorts paths)."""
  flat = jax.tree_util.tree_flatten_with_path(mask)[0]
  from slm_jax.train.sharding import path_string  # pylint: disable=import-outside-toplevel
  return [m for _, m in sorted((path_string(p), m) for p, m in flat)]
