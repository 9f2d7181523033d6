"""Live syntactic metrics (`train.eval_syntax_every`): logged next to the loss every N steps, for
terminal models (direct scoring) and tree models (a small beam), without changing the run's
losses; a run that asks for them without the data fails at start-up, naming the setting."""

from __future__ import annotations

import json

import pytest

from tests.shared_data import require_shared
from tests.test_train import losses, small_config
from slm_jax.eval.live import LiveSyntax
from slm_jax.train import trainer

LIVE = {"train.eval_syntax_sg_items": 1, "train.eval_syntax_blimp_pairs": 1,
        "train.eval_syntax_beam": 2}


def records(workdir) -> list[dict]:
  return [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("name", [pytest.param("terminal", marks=pytest.mark.slow), "tree"])
def test_live_metrics_are_logged_and_leave_the_losses_unchanged(name, tmp_path):
  require_shared("syntaxgym")
  require_shared("blimp")
  off = tmp_path / "off"
  on = tmp_path / "on"
  trainer.train(small_config(name, steps=4, **{"train.eval_syntax_every": 0}), off)
  trainer.train(small_config(name, steps=4, **{"train.eval_syntax_every": 2, **LIVE}), on,
                live_metrics=LiveSyntax)
  assert losses(on) == losses(off) and len(losses(on)) == 4  # the same trajectory
  live = [r for r in records(on) if "live_sg" in r]
  assert [r["step"] for r in live] == [2, 4]
  for r in live:
    assert 0 <= r["live_sg"] <= 100 and 0 <= r["live_sg_suite_mean"] <= 100
    assert 0 <= r["live_blimp"] <= 100 and r["live_syntax_seconds"] > 0
    assert isinstance(r["live_blimp_wrong_ties_nonfinite"], int)
  assert not any("live_sg" in r for r in records(off))


def test_live_metrics_without_data_fail_at_start_up(tmp_path):
  config = small_config("terminal", steps=2, **{"train.eval_syntax_every": 1,
                                                "train.eval_syntax_data": str(tmp_path / "no")})
  with pytest.raises(FileNotFoundError, match="train.eval_syntax_every"):
    trainer.train(config, tmp_path / "run", live_metrics=LiveSyntax)
  assert not any("loss" in r for r in records(tmp_path / "run"))  # before any step


def test_live_metrics_without_a_factory_are_refused(tmp_path):
  from slm_jax.train import run_config as config_builder
  config = small_config("terminal", steps=2, **{"train.eval_syntax_every": 1})
  with pytest.raises(config_builder.ConfigError, match="live-metrics factory"):
    trainer.train(config, tmp_path / "run")


def test_old_configs_load_without_the_live_keys():
  from slm_jax.train import run_config as config_builder
  raw = json.loads(config_builder.validate(config_builder.build("tree", "tiny")).to_json())
  for key in ("eval_syntax_every", "eval_syntax_sg_items", "eval_syntax_blimp_pairs",
              "eval_syntax_beam", "eval_syntax_data"):
    raw["train"].pop(key)
  assert config_builder.validate(raw).train.eval_syntax_every == 0  # off for older runs
  with pytest.raises(config_builder.ConfigError, match="eval_syntax_beam"):
    config_builder.validate({**raw, "train": {**raw["train"], "eval_syntax_beam": 0}})
