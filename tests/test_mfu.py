"""Model FLOPs per token (6N + 12·L·H·K·T), the peak table and the MFU the trainer logs."""

from __future__ import annotations

import json

import pytest

from slm_jax.train import run_config as config_builder
from slm_jax.model.decoder import non_embedding_param_count
from slm_jax.train import mfu, trainer
from tests.test_train import small_config


def test_flops_per_token_is_6n_plus_the_dense_attention_term():
  model = config_builder.validate(config_builder.build("tgtree", "100m")).model.replace(
      vocab_size=50_000)
  n = non_embedding_param_count(model) + model.d_model * 50_000
  attention = 12 * model.n_layers * model.n_heads * model.head_dim * 2048
  assert mfu.model_flops_per_token(model, 2048) == 6 * n + attention
  # the attention term grows linearly with T; 6N does not depend on T
  assert (mfu.model_flops_per_token(model, 4096) - mfu.model_flops_per_token(model, 2048)
          == attention)
  with pytest.raises(ValueError, match="vocab_size"):
    mfu.model_flops_per_token(model.replace(vocab_size=None), 2048)


def test_peaks_by_device_kind_and_unknown_devices():
  assert mfu.peak_flops("TPU v5p") == 459e12 and mfu.peak_flops("TPU v4") == 275e12
  assert mfu.peak_flops("NVIDIA H100 80GB HBM3") == 989e12
  assert mfu.peak_flops("NVIDIA H200 NVL") == 989e12  # longest known prefix
  assert mfu.peak_flops("cpu") is None
  out = mfu.throughput(1000.0, 4, 1e9, "TPU v4")
  assert out == {"tokens_per_s_per_chip": 250.0, "mfu": pytest.approx(250.0 * 1e9 / 275e12)}
  assert mfu.throughput(1000.0, 4, 1e9, "cpu") == {"tokens_per_s_per_chip": 250.0}


def test_the_trainer_logs_tokens_per_chip(tmp_path, monkeypatch):
  trainer.train(small_config("terminal", steps=2, **{"train.log_every": 1}), tmp_path / "a")
  lines = [json.loads(l) for l in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
  logged = [r for r in lines if "loss" in r]
  # The first step (its compilation) is not timed: its record has no rate yet (null).
  assert logged[0]["tokens_per_s"] is None and logged[0]["tokens_per_s_per_chip"] is None
  assert all(r["tokens_per_s_per_chip"] > 0 and "mfu" not in r for r in logged[1:])  # cpu: no peak
  monkeypatch.setitem(mfu.PEAK_BF16_FLOPS, "cpu", 1e12)  # a known peak: MFU is logged
  trainer.train(small_config("terminal", steps=2, **{"train.log_every": 1}), tmp_path / "b")
  lines = [json.loads(l) for l in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
  assert all(0 < r["mfu"] < 1 for r in lines if "loss" in r and r["step"] > 1)
