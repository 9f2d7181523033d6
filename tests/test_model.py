"""The decoder: parameter counts (SPEC §6), causality and mask semantics on real lin2 rows (§3),
packing and padding, GQA / biases / untied head / RoPE, and the attention-kernel seam."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from slm_jax.kinds import Kind
from slm_jax.linearize import linearize
from slm_jax.model.attention import KernelEntry
from slm_jax.model import (ATTENTION_KERNELS, Decoder, KernelNotRegisteredError, ModelConfig,
                           apply_rope, attention_mask, non_embedding_param_count, param_count,
                           resolve_attention_impl, scale_config, xla_attention)
from slm_jax.structure import dense_mask, parse_attention, row_metadata
from slm_jax.trees import Tree

ATTENTIONS = ("causal", "tg", "tg_nomask", "tg_nomask_aug", "mix(tg_nomask,tg)", "mix(causal,tg)")
CATS = Tree("S", ("Cats", Tree("VP", ("chase", "mice"))))
HUNGRY_CAT = Tree("S", (Tree("NP", ("the", "hungry", "cat")), Tree("VP", ("meows",))))
WILL_GO = Tree("S", (Tree("VP", ("will", Tree("VP", ("go",)))),))
VOCAB = 40


def tiny(attention: str = "causal", **overrides) -> ModelConfig:
  fields = dict(vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=4, compute_dtype=jnp.float32,
                init_std=0.2, attention=attention)
  return ModelConfig(**{**fields, **overrides})


def build(config: ModelConfig, seed: int = 0) -> Decoder:
  return Decoder(config, rngs=nnx.Rngs(seed))


def encode(document) -> tuple[np.ndarray, np.ndarray]:
  """lin2 token ids (symbols hashed into the small vocabulary) and kinds of one document."""
  seq = linearize(document, "lin2")
  ids = {s: i + 1 for i, s in enumerate(sorted(set(seq.symbols())))}
  return np.asarray([ids[s] % VOCAB for s in seq.symbols()], np.int32), seq.kinds.astype(np.int32)


def row(*documents, length: int | None = None):
  """One packed row (batch of 1): tokens_BT and RowMetadata, padded to `length`."""
  parts = [encode(d) for d in documents]
  tokens = np.concatenate([t for t, _ in parts])
  kinds = np.concatenate([k for _, k in parts])
  segment = np.concatenate([np.full(len(t), i + 1, np.int32) for i, (t, _) in enumerate(parts)])
  pad = (length or len(tokens)) - len(tokens)
  tokens, kinds, segment = (np.pad(a, (0, pad)) for a in (tokens, kinds, segment))
  meta = jax.tree.map(jnp.asarray, row_metadata(kinds[None], segment[None]))  # numpy: fast
  return jnp.asarray(tokens[None]), meta


@nnx.jit
def forward(model: Decoder, tokens_BT, meta):
  return model(tokens_BT, meta)


@nnx.jit
def _dependence(model: Decoder, tokens_BT, meta):
  x_BTD = model.embed(tokens_BT)
  # Forward mode: jax 0.10.2's jit'd jacrev of RMSNorm with traced weights miscompiles on CPU
  # (the identity-basis vmap; plain grads are right).
  jac = jax.jacfwd(lambda x: model.logits(model.hidden(x, meta))[0])(x_BTD)  # [T, V, 1, T', D]
  return jnp.abs(jac).sum(axis=(1, 2, 4))


def input_dependence(model: Decoder, tokens_BT, meta) -> np.ndarray:
  """[T, T'] Σ |d logits[t] / d embedding[t']| (Jacobian wrt the input embeddings)."""
  return np.asarray(_dependence(model, tokens_BT, meta))


# --- parameter counts (SPEC §6) ------------------------------------------------------------------


def test_param_counts_match_spec():
  c100 = scale_config("100m", 50_320)
  assert non_embedding_param_count(c100) == 70_798_080  # 12·10d² + 25 RMSNorm weights
  assert round(non_embedding_param_count(c100) / 1e6, 1) == 70.8
  assert round(param_count(c100) / 1e6) == 109
  c500 = scale_config("500m", 50_320)
  assert non_embedding_param_count(c500) == 507_557_248
  assert round(non_embedding_param_count(c500) / 1e6) == 508
  c1b = scale_config("1b", 50_320)
  assert round(non_embedding_param_count(c1b) / 1e9, 2) == 1.07
  # The paper's models carry OLMo biases (every linear layer and norm): exactly the N = 507.9M
  # of paper Table 8 / SPEC §7, and 579M total with the tied 50,320-token embedding.
  olmo500 = scale_config("500m", 50_320, include_bias=True)
  assert non_embedding_param_count(olmo500) == 507_896_576
  assert round(param_count(olmo500) / 1e6) == 579


def test_param_count_parts():
  base = tiny()
  D, K, L = base.d_model, base.head_dim, base.n_layers
  assert param_count(base) - non_embedding_param_count(base) == VOCAB * D
  untied = base.replace(tie_embeddings=False)
  assert param_count(untied) == param_count(base) + VOCAB * D
  assert non_embedding_param_count(untied) == non_embedding_param_count(base)
  gqa = base.replace(n_kv_heads=2)
  assert param_count(base) - param_count(gqa) == L * 2 * D * 2 * K
  assert param_count(base.replace(qkv_bias=True)) - param_count(base) == L * 3 * 4 * K
  assert param_count(base.replace(mlp_bias=True)) - param_count(base) == L * (2 * 2 * D + D)
  hidden = 2 * D  # mlp_ratio 4 → up 4D outputs, down 2D inputs
  assert base.mlp_hidden == hidden


# --- causality and mask semantics on lin2 rows ----------------------------------------------------


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_no_logit_depends_on_a_later_token(attention):
  tokens, meta = row([HUNGRY_CAT, WILL_GO])
  dependence = input_dependence(build(tiny(attention)), tokens, meta)
  T = tokens.shape[1]
  assert np.all(dependence[np.triu_indices(T, 1)] == 0.0)
  assert np.all(np.diag(dependence) > 0)
  assert np.all(dependence[:, 0] > 0)  # everything reaches BOS (the stack's bottom)


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_one_layer_dependence_is_the_mask(attention):
  """With one layer, logits[t] depend on input t' exactly where some head's mask lets t see t'."""
  tokens, meta = row([HUNGRY_CAT, WILL_GO])
  dependence = input_dependence(build(tiny(attention, n_layers=1)), tokens, meta)
  visible = dense_mask(jax.tree.map(np.asarray, meta), parse_attention(attention))[0].any(axis=0)
  np.testing.assert_array_equal(dependence > 0, visible)


def test_tg_stack_query_ignores_popped_tokens():
  # <s> (S Cats (VP chase mice VP) VP) S) S) </s>: the CNT2 `VP)` at 7 is a STACK query;
  # `chase` (4) was popped by the COMPOSE at 6.
  tokens, meta = row(CATS)
  assert int(meta.kind[0, 7]) == Kind.CNT2 and int(meta.kind[0, 4]) == Kind.TERMINAL
  changed = tokens.at[0, 4].set((tokens[0, 4] + 7) % VOCAB)
  for attention, same in (("tg", True), ("causal", False), ("tg_nomask", False)):
    model = build(tiny(attention, n_layers=1))
    before, after = forward(model, tokens, meta)[0, 7], forward(model, changed, meta)[0, 7]
    assert bool(jnp.array_equal(before, after)) == same, attention
    compose_before, compose_after = (forward(model, t, meta)[0, 6] for t in (tokens, changed))
    assert not jnp.array_equal(compose_before, compose_after)  # the COMPOSE at 6 reads `chase`


@pytest.mark.parametrize("attention", ("causal", "tg", "mix(tg_nomask,tg)"))
def test_packed_documents_are_independent(attention):
  model = build(tiny(attention))
  tokens, meta = row(HUNGRY_CAT, WILL_GO, length=32)
  first = len(encode(HUNGRY_CAT)[0])
  second = len(encode(WILL_GO)[0])
  logits = forward(model, tokens, meta)
  alone_tokens, alone_meta = row(WILL_GO, length=32)
  alone = forward(model, alone_tokens, alone_meta)
  np.testing.assert_allclose(logits[0, first:first + second], alone[0, :second], rtol=1e-5,
                             atol=1e-5)
  scrambled = tokens.at[0, 1:first].set((tokens[0, 1:first] * 3 + 1) % VOCAB)
  np.testing.assert_array_equal(logits[0, first:], forward(model, scrambled, meta)[0, first:])
  assert np.all(np.isfinite(logits))


def test_padding_rows_are_finite():
  model = build(tiny("tg"))
  tokens = jnp.zeros((2, 12), jnp.int32)
  kinds = jnp.zeros((2, 12), jnp.int32)
  meta = jax.jit(lambda k, s: row_metadata(k, s, xp=jnp))(kinds, jnp.zeros((2, 12), jnp.int32))
  assert np.all(np.isfinite(forward(model, tokens, meta)))
  default_dtype = build(tiny("tg", compute_dtype=jnp.bfloat16))  # bf16 compute, f32 logits
  logits = forward(default_dtype, tokens, meta)
  assert logits.dtype == jnp.float32 and np.all(np.isfinite(logits))


# --- attention internals --------------------------------------------------------------------------


@pytest.mark.parametrize("attention", ("tg", "mix(causal,tg)", "mix(tg_nomask,tg)"))
def test_xla_attention_matches_per_head_reference(attention):
  """Grouped masks + GQA equal a naive loop over heads with per-head codes and repeated KV."""
  spec = parse_attention(attention)
  _, meta = row(HUNGRY_CAT, CATS, length=30)
  B, T, H, G, K = 1, 30, 4, 2, 8
  q, k, v = jax.random.normal(jax.random.key(1), (3, B, T, H, K))
  k, v = k[:, :, :G], v[:, :, :G]
  out = jax.jit(xla_attention, static_argnums=4)(q, k, v, meta, spec)

  @jax.jit
  def naive(q, k, v, meta):
    mask_BHTS = attention_mask(meta, spec.head_codes(H))
    heads = []
    for h in range(H):
      kv = h // (H // G)
      logits = jnp.einsum("btk,bsk->bts", q[:, :, h], k[:, :, kv]) / np.sqrt(K)
      probs = jax.nn.softmax(jnp.where(mask_BHTS[:, h], logits, -jnp.inf), axis=-1)
      heads.append(jnp.einsum("bts,bsk->btk", probs, v[:, :, kv]))
    return jnp.stack(heads, axis=2)

  np.testing.assert_allclose(out, naive(q, k, v, meta), rtol=1e-5, atol=1e-5)


def test_hybrid_head_codes():
  _, meta = row(CATS)
  mask = attention_mask(meta, parse_attention("mix(causal,tg)").head_codes(4))[0]
  meta = jax.tree.map(np.asarray, meta)
  causal = dense_mask(meta, parse_attention("causal"))[0, 0]
  tg = dense_mask(meta, parse_attention("tg"))[0, 0]
  for h, expected in enumerate((causal, causal, tg, tg)):
    np.testing.assert_array_equal(mask[h], expected)


def test_gqa_equals_mha_with_repeated_kv():
  gqa_config = tiny("tg", n_kv_heads=2)
  gqa, mha = build(gqa_config), build(gqa_config.replace(n_kv_heads=4), seed=1)
  attn = gqa.blocks[0].attn
  assert attn.k.kernel.shape == (32, 2 * 8) and attn.q.kernel.shape == (32, 4 * 8)
  mha_state = nnx.state(mha, nnx.Param)
  mha_leaves = dict(nnx.to_flat_state(mha_state))
  for path, leaf in nnx.to_flat_state(nnx.state(gqa, nnx.Param)):
    value = leaf[...]
    if path[-2] in ("k", "v") and path[-1] == "kernel":  # head h reads KV head h // 2
      value = jnp.repeat(value.reshape(32, 2, 8), 2, axis=1).reshape(32, 32)
    mha_leaves[path][...] = value
  nnx.update(mha, mha_state)
  tokens, meta = row(HUNGRY_CAT, length=20)
  np.testing.assert_allclose(forward(gqa, tokens, meta), forward(mha, tokens, meta), rtol=1e-5,
                             atol=1e-5)


def test_biases_and_untied_head():
  model = build(tiny(qkv_bias=True, tie_embeddings=False))
  attn = model.blocks[0].attn
  assert attn.q.bias.shape == (32,) and attn.k.bias.shape == (32,) and attn.o.bias is None
  assert model.blocks[0].mlp.up.bias is None and model.blocks[0].attn_norm.bias is None
  assert model.lm_head.kernel.shape == (32, VOCAB)
  tokens, meta = row(CATS)
  assert forward(model, tokens, meta).shape == (1, tokens.shape[1], VOCAB)
  olmo = build(tiny(include_bias=True))
  block = olmo.blocks[0]
  assert block.attn.o.bias.shape == (32,) and block.mlp.up.bias.shape == (128,)
  assert block.mlp.down.bias.shape == (32,) and block.attn_norm.bias.shape == (32,)


def test_rope_relative_positions_and_theta():
  q, k = jax.random.normal(jax.random.key(0), (2, 1, 1, 1, 16))
  pos = lambda p: jnp.full((1, 1), p, jnp.int32)
  for theta in (10_000.0, 500_000.0):
    score = lambda m, n: jnp.sum(apply_rope(q, pos(m), theta) * apply_rope(k, pos(n), theta))
    np.testing.assert_allclose(score(3, 1), score(10, 8), rtol=1e-5)
    np.testing.assert_allclose(score(7, 7), jnp.sum(q * k), rtol=1e-5)
  unit = jnp.zeros((1, 1, 1, 16)).at[..., 1].set(1.0)  # pair (1, 9) turns at θ^(-2/16)
  for theta in (10_000.0, 100.0):
    angle = 5 * theta ** (-2 / 16)
    rotated = apply_rope(unit, pos(5), theta)[0, 0, 0]
    np.testing.assert_allclose([rotated[1], rotated[9]], [np.cos(angle), np.sin(angle)], rtol=1e-5)
  tokens, meta = row(CATS)
  base = build(tiny())
  other = build(tiny(rope_theta=100.0))
  assert other.blocks[0].attn.rope_theta == 100.0
  assert not np.allclose(forward(base, tokens, meta), forward(other, tokens, meta))


# --- config and the kernel seam -------------------------------------------------------------------


@pytest.mark.parametrize("overrides, field", [
    (dict(n_kv_heads=3), "n_kv_heads"), (dict(mlp_ratio=0), "mlp_ratio"),
    (dict(attention="bogus"), "attention"), (dict(attention_impl="cuda"), "attention_impl"),
    (dict(n_heads=3, head_dim=8, attention="mix(causal,tg)"), "n_heads"),
    (dict(d_model=30), "head_dim"), (dict(compute_dtype=jnp.int32), "compute_dtype"),
])
def test_config_validation_names_the_field(overrides, field):
  with pytest.raises(ValueError, match=f"model.{field}"):
    tiny(**overrides)


def test_config_defaults():
  config = tiny("mix(causal,tg)")
  assert config.n_kv_heads == 4 and config.head_dim == 8
  assert config.attention == parse_attention("mix(causal,tg)")
  assert config.replace(n_heads=2).head_dim == 16


def test_resolve_attention_impl(monkeypatch):
  monkeypatch.setattr("slm_jax.model.attention.ATTENTION_KERNELS", {})
  monkeypatch.setattr("slm_jax.model.attention._IMPORT_ERRORS", {})
  missing = KernelEntry("slm_jax.kernels.no_such_module", "attention", "a test kernel")
  monkeypatch.setattr("slm_jax.model.attention.KERNELS",  # kernels that fail to import
                      {"pallas_tpu": missing, "triton_gpu": missing})
  assert resolve_attention_impl("auto", "cpu") == "xla"
  assert resolve_attention_impl("auto", "tpu") == "xla"  # nothing registered: reference path
  assert resolve_attention_impl("xla", "gpu") == "xla"
  with pytest.raises(KernelNotRegisteredError, match="pallas_tpu.*import failed.*no_such_module"):
    resolve_attention_impl("pallas_tpu", "tpu")
  with pytest.raises(KernelNotRegisteredError, match="triton_gpu"):
    resolve_attention_impl("triton_gpu", "gpu")
  with pytest.raises(ValueError, match="attention_impl"):
    resolve_attention_impl("flash", "cpu")


def test_registered_kernel_is_used(monkeypatch):
  calls = []

  def fake_kernel(q, k, v, meta, attention):
    calls.append(attention.name)
    return xla_attention(q, k, v, meta, attention)

  monkeypatch.setitem(ATTENTION_KERNELS, "pallas_tpu", fake_kernel)
  assert resolve_attention_impl("auto", "tpu") == "pallas_tpu"
  model = build(tiny("tg", attention_impl="pallas_tpu"))
  tokens, meta = row(CATS)
  reference = forward(build(tiny("tg")), tokens, meta)
  np.testing.assert_allclose(forward(model, tokens, meta), reference, rtol=1e-6)
  assert calls == ["tg", "tg"]


def test_checkpoint_options_have_rules_and_old_configs_load():
  """The HF-import / LoRA options (SPEC §13) are checked like every model key, and a saved
  config written before they existed still validates with their defaults."""
  from slm_jax.train import run_config as config_builder  # pylint: disable=import-outside-toplevel
  from slm_jax.sections import SectionError  # pylint: disable=import-outside-toplevel
  for bad, word in ((dict(norm_position="side"), "norm_position"),
                    (dict(rope_scaling="yarn"), "rope_scaling"),
                    (dict(rope_scaling="llama3", rope_low_freq_factor=4.0,
                          rope_high_freq_factor=1.0), "rope_low_freq_factor"),
                    (dict(lora_rank=-1), "lora_rank")):
    with pytest.raises(SectionError, match=word):
      tiny(**bad)
  saved = config_builder.validate(config_builder.build("terminal", "tiny")).to_dict()
  new = ("o_bias", "norm_position", "norm_cast_first", "rope_scaling", "rope_factor",
         "rope_low_freq_factor", "rope_high_freq_factor", "rope_original_max_position",
         "init_from", "lora_rank", "lora_alpha", "lora_dropout", "lora_targets")
  for key in new:
    del saved["model"][key]
  del saved["optimizer"]["trainable"]
  old = config_builder.validate(saved)
  assert (old.model.norm_position, old.model.lora_rank, old.optimizer.trainable) == (
      "pre", 0, "all")


def test_llama3_rope_scaling_bands():
  """Llama-3 scaling keeps short wavelengths, divides long ones by the factor, blends between."""
  from slm_jax.model.layers import RopeScaling, rope_frequencies  # pylint: disable=import-outside-toplevel
  plain = np.asarray(rope_frequencies(16, 10000.0))
  scaled = np.asarray(rope_frequencies(16, 10000.0, RopeScaling(8.0, 1.0, 4.0, 64)))
  wavelength = 2 * np.pi / plain
  np.testing.assert_array_equal(scaled[wavelength < 16], plain[wavelength < 16])
  np.testing.assert_allclose(scaled[wavelength > 64], plain[wavelength > 64] / 8, rtol=1e-6)
  middle = (wavelength >= 16) & (wavelength <= 64)
  assert middle.any() and np.all((scaled[middle] < plain[middle]) &
                                 (scaled[middle] > plain[middle] / 8))


@pytest.mark.parametrize("norm_position", ["pre", "post"])
def test_side_and_observe_hooks(norm_position):
  """`side(layer, x)` adds its output to the residual with self-attention, reading the block's
  attention input; a zero side branch changes nothing; `observe` sees every block's output."""
  model = build(tiny(norm_position=norm_position))
  tokens, meta = row(CATS)
  base = model(tokens, meta)  # eager, as the hooked calls below
  zero = model(tokens, meta, side=lambda layer, x: jnp.zeros_like(x))
  np.testing.assert_array_equal(np.asarray(zero), np.asarray(base))
  seen, states = [], []
  model(tokens, meta, side=lambda layer, x: seen.append((layer, x.shape)) or jnp.zeros_like(x),
        observe=lambda layer, x: states.append(x))
  assert [s[0] for s in seen] == list(range(model.config.n_layers))
  assert len(states) == model.config.n_layers
  block = model.blocks[0]
  x = model.embed(tokens).astype(model.config.compute_dtype)
  expected_input = x if norm_position == "post" else block.attn_norm(x)
  got = []
  model(tokens, meta, side=lambda layer, x: got.append(x) or jnp.zeros_like(x))
  np.testing.assert_allclose(np.asarray(got[0]), np.asarray(expected_input), rtol=1e-6)
  shifted = model(tokens, meta, side=lambda layer, x: jnp.full_like(x, 0.1) * (layer == 0))
  assert not np.allclose(np.asarray(shifted), np.asarray(base))
