"""LoRA adapters a checkpoint lacks get their fresh init (`model.lora.adapter_init`) without the
whole model being built a second time (issue #34: on SmolLM2-135M, jit-initializing the full
30-layer model to keep its adapters took minutes to trace and compile on CPU)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("transformers")

import jax  # noqa: E402
from flax import nnx  # noqa: E402

from slm_jax.hf import load  # noqa: E402
from slm_jax.model import decoder, lora  # noqa: E402
from slm_jax.hf.scoring import logits  # noqa: E402
from tests.test_hf_import import TOL, hf_logits, ids_of, make_hf_model  # noqa: E402


def test_adapters_are_fresh_and_the_model_is_built_once(tmp_path, monkeypatch):
  hf_model = make_hf_model("llama")
  hf_model.save_pretrained(tmp_path)
  built = []
  original = decoder.Decoder.__init__

  def counting(self, *args, **kwargs):
    built.append(1)
    original(self, *args, **kwargs)

  monkeypatch.setattr(decoder.Decoder, "__init__", counting)
  model = load.load_model(tmp_path, lora_rank=4, lora_alpha=8.0, compute_dtype="float32")
  assert len(built) == 1  # the abstract model only (before: a second, jitted, full build)
  adapters = nnx.to_pure_dict(nnx.state(model, nnx.LoRAParam))
  leaves = {jax.tree_util.keystr(p): np.asarray(x)
            for p, x in jax.tree_util.tree_leaves_with_path(adapters)}
  a = {k: v for k, v in leaves.items() if "lora_a" in k}
  b = {k: v for k, v in leaves.items() if "lora_b" in k}
  assert a and len(a) == len(b)
  for value in b.values():
    assert not value.any()  # B = 0: the fresh model's outputs are the checkpoint's
  for value in a.values():
    bound = value.shape[-2] ** -0.5
    assert np.abs(value).max() <= bound and value.std() > bound / 4  # uniform(±1/√D_in)
  assert len({v.tobytes() for v in a.values()}) == len(a)  # one key per adapter
  ids = ids_of(8)
  assert np.abs(logits(model, ids) - hf_logits(hf_model, ids)).max() < TOL  # B = 0: unchanged


def test_adapter_init_rule():
  key = jax.random.key(0)
  a = np.asarray(lora.adapter_init("lora_a", key, (2, 16, 4)))
  assert a.shape == (2, 16, 4) and np.abs(a).max() <= 0.25
  assert not np.asarray(lora.adapter_init("lora_b", None, (2, 4, 8))).any()
  with pytest.raises(ValueError, match="not a LoRA adapter"):
    lora.adapter_init("kernel", key, (2, 2))
