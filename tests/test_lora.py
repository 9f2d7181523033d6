"""LoRA adapters and frozen-backbone training: fresh adapters leave logits unchanged, merging
equals the unmerged forward, the fused up-projection's halves are targeted apart, dropout is on
only while training, and a LoRA run changes nothing but the adapters (bitwise)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from slm_jax.hf.scoring import logits
from slm_jax.model import Decoder, ModelConfig, lora
from slm_jax.sections import SectionError
from slm_jax.train import trainer
from slm_jax.train.loading import load_run
from slm_jax.train.optimizer import trainable_mask
from tests.test_train import small_config

VOCAB = 50
IDS = np.random.default_rng(0).integers(0, VOCAB, (2, 19))


def config(**overrides) -> ModelConfig:
  fields = dict(vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                compute_dtype=jnp.float32, init_std=0.2)
  return ModelConfig(**{**fields, **overrides})


def flat(model) -> dict[str, np.ndarray]:
  state = nnx.to_pure_dict(nnx.state(model, nnx.Param))
  return {jax.tree_util.keystr(p, simple=True, separator="/"): np.asarray(x)
          for p, x in jax.tree_util.tree_flatten_with_path(state)[0]}


def with_base(adapted: Decoder, base: Decoder) -> Decoder:
  """`adapted` holding `base`'s weights (its adapters kept)."""
  state = nnx.state(adapted, nnx.Param)
  pure = nnx.to_pure_dict(state)
  base_flat = flat(base)
  pure = jax.tree_util.tree_map_with_path(
      lambda p, x: base_flat.get(jax.tree_util.keystr(p, simple=True, separator="/"), x), pure)
  nnx.replace_by_pure_dict(state, pure)
  nnx.update(adapted, state)
  return adapted


def randomize_adapters(model: Decoder, seed: int = 1) -> None:
  for i, (_, layer) in enumerate(lora.lora_layers(model)):
    layer.lora_b[...] = 0.3 * jax.random.normal(jax.random.key(seed + i), layer.lora_b.shape)


def test_fresh_adapters_leave_logits_unchanged():
  base = Decoder(config(), rngs=nnx.Rngs(0))
  adapted = with_base(Decoder(config(lora_rank=4), rngs=nnx.Rngs(5)), base)
  assert len(lora.lora_layers(adapted)) == 2 * 6  # q k v o up(+gate) down per block
  np.testing.assert_array_equal(logits(adapted, IDS), logits(base, IDS))
  randomize_adapters(adapted)  # the comparison can fail: trained adapters change the logits
  assert np.abs(logits(adapted, IDS) - logits(base, IDS)).max() > 1e-3


def test_merge_equals_unmerged_forward_and_unmerge_restores():
  model = Decoder(config(lora_rank=3, lora_alpha=6.0), rngs=nnx.Rngs(0))
  randomize_adapters(model)
  before, kernels = logits(model, IDS), flat(model)
  assert lora.merge(model) == 12 and lora.merge(model) == 0  # merging twice is a no-op
  np.testing.assert_allclose(logits(model, IDS), before, atol=1e-5)
  assert lora.unmerge(model) == 12
  np.testing.assert_allclose(logits(model, IDS), before, atol=1e-5)
  for path, value in flat(model).items():
    np.testing.assert_allclose(value, kernels[path], atol=1e-6, err_msg=path)


def test_fused_up_projection_targets_gate_and_up_apart():
  model = Decoder(config(lora_rank=2, lora_targets=("gate",)), rngs=nnx.Rngs(0))
  randomize_adapters(model)
  up = model.blocks[0].mlp.up
  assert up.parts == (False, True) and up.lora_a.shape == (1, 32, 2)
  delta = np.asarray(up.delta())
  hidden = config().mlp_hidden
  assert not delta[:, :hidden].any() and delta[:, hidden:].any()  # [up | gate]: gate only
  assert not isinstance(model.blocks[0].attn.q, lora.LoraLinear)


def test_dropout_only_while_training():
  model = Decoder(config(lora_rank=4, lora_dropout=0.5), rngs=nnx.Rngs(0))
  randomize_adapters(model)
  layer = model.blocks[0].attn.q
  x = jnp.ones((1, 3, 32))
  np.testing.assert_array_equal(layer(x), layer(x))  # no key: dropout off
  with lora.dropout_rng(jax.random.key(0)):
    first, second = layer(x), layer(x)
  assert np.abs(np.asarray(first) - np.asarray(second)).max() > 1e-4


def test_config_rules():
  with pytest.raises(SectionError, match="lora_targets"):
    config(lora_rank=2, lora_targets=("qkv",))
  with pytest.raises(SectionError, match="lora_dropout"):
    config(lora_rank=2, lora_dropout=1.0)


def test_lora_run_changes_only_the_adapters(tmp_path):
  cfg = small_config("terminal", steps=4, **{"model.lora_rank": 4, "model.lora_alpha": 8.0,
                                              "optimizer.trainable": "lora"})
  summary = trainer.train(cfg, tmp_path)
  assert summary.backbone_unchanged is True
  run = load_run(tmp_path)
  mconfig = cfg.model.replace(vocab_size=run.tokenizer.vocab_size)
  initial = flat(Decoder(mconfig.replace(compute_dtype=jnp.float32), rngs=nnx.Rngs(0)))
  trained = flat(run.model)
  mask = {p: lora.is_lora_path(p) for p in trained}
  assert sum(mask.values()) == 2 * 6  # lora_a and lora_b of 6 layers, one block
  for path, value in trained.items():
    if mask[path]:
      if path.endswith("lora_b"):
        assert np.abs(value).max() > 0, path  # B starts at zero: it must have moved
    else:
      np.testing.assert_array_equal(value, initial[path], err_msg=path)
  pure = nnx.to_pure_dict(nnx.state(run.model, nnx.Param))
  assert jax.tree.leaves(trainable_mask(pure, "lora")).count(True) == 12


@pytest.mark.slow
def test_frozen_backbone_from_a_checkpoint_stays_bitwise(tmp_path):
  """model.init_from + optimizer.trainable=lora,norms: the run starts from the imported weights;
  afterwards every frozen array equals the imported one bit for bit, the norms moved."""
  pytest.importorskip("transformers")
  from slm_jax.hf import load_params  # pylint: disable=import-outside-toplevel
  from tests.test_hf_import import make_hf_model  # pylint: disable=import-outside-toplevel
  folder = tmp_path / "llama"
  make_hf_model("llama", hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                num_key_value_heads=4, rms_norm_eps=1e-6, tie_word_embeddings=True
                ).save_pretrained(folder)
  cfg = small_config("terminal", steps=3, **{
      "model.init_from": str(folder), "model.norm_cast_first": True, "model.lora_rank": 2,
      "optimizer.trainable": "lora,norms"})
  summary = trainer.train(cfg, tmp_path / "run")
  assert summary.backbone_unchanged is True
  run = load_run(tmp_path / "run")
  imported = load_params(folder, cfg.model.replace(vocab_size=run.tokenizer.vocab_size))
  imported = {jax.tree_util.keystr(p, simple=True, separator="/"): np.asarray(x)
              for p, x in jax.tree_util.tree_flatten_with_path(imported)[0]}
  moved = []
  for path, value in flat(run.model).items():
    if lora.is_lora_path(path):
      continue
    if "norm" in path:
      moved.append(not np.array_equal(value, imported[path]))
    else:
      np.testing.assert_array_equal(value, imported[path], err_msg=path)
  assert moved and all(moved)
