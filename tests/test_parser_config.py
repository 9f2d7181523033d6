"""`python -m slm_jax.parser.train`'s settings through the one config loader: the packaged
presets (same values as before they were files), `--config=FILE`, `--config.KEY=VALUE`, the old
flags as key aliases, problems in one line; and the shipped model's `config.json` still loads
(the whole shipped model is loaded by tests/test_parser_proposals.py)."""

from __future__ import annotations

import json
import pathlib

import pytest

from slm_jax import cli
from slm_jax.config_files import ConfigError
from slm_jax.parser import train
from slm_jax.parser.config import LOADER, ParserModelConfig, ParserTrainConfig, named_config

GUM = pathlib.Path(train.__file__).resolve().parent / "data" / "gum"


def config_of(*argv, monkeypatch):
  """The ParserTrainConfig `main` would train with (stopped before training)."""
  seen = {}
  stop = lambda cfg, workdir, args: seen.setdefault("cfg", cfg) and 0
  monkeypatch.setattr(train, "train", stop)
  monkeypatch.setattr(train, "train_ensemble", stop)
  assert train.main(["--workdir=w", *argv]) == 0
  return seen["cfg"]


def test_the_presets_keep_their_values():
  tiny = named_config("tiny")
  assert (tiny.model.hidden, tiny.model.heads, tiny.buckets, tiny.tag_weight) == (16, 2,
                                                                                 (8, 16, 32, 64),
                                                                                 0.5)
  assert named_config("default") == ParserTrainConfig(schedule="cosine", max_epochs=20, tag_weight=0.5,
                                                members=3)
  gpu = named_config("gpu")
  assert (gpu.model.char_filters, gpu.model.layers, gpu.batch_words, gpu.patience) == (
      256, 3, 3000, 8)
  assert LOADER.validate(tiny.to_dict()) == tiny


def test_old_flags_name_file_and_overrides(tmp_path, monkeypatch):
  assert config_of(monkeypatch=monkeypatch) == named_config("default")  # --config's default
  cfg = config_of("--config=tiny", "--encoder=transformer", "--max-epochs=2", "--eval_every=5",
                  "--max_minutes=0.5", "--seed=3", "--members=1", "--config.model.hidden=8",
                  monkeypatch=monkeypatch)
  assert (cfg.model.encoder, cfg.model.hidden, cfg.max_epochs, cfg.eval_every, cfg.max_minutes,
          cfg.seed, cfg.members) == ("transformer", 8, 2, 5, 0.5, 3, 1)
  assert cfg.learning_rate == named_config("tiny").learning_rate
  path = tmp_path / "mine.py"
  path.write_text("def get_config():\n  return {'model': {'layers': 3}, 'buckets': '16,64'}\n")
  cfg = config_of(f"--config={path}", "--config.model.layers=4", monkeypatch=monkeypatch)
  assert (cfg.model.layers, cfg.buckets, cfg.members) == (4, (16, 64), 1)


def test_problems_are_one_line_naming_the_file(tmp_path, capsys):
  path = tmp_path / "bad.py"
  path.write_text("def get_config():\n  return {'model': {'hiden': 3, 'dropout': 1.5}, "
                  "'schedule': 'linear'}\n")
  code = cli.run(train.main, ["--workdir=w", f"--config={path}", "--max_epochs=some",
                              "--config.members=0"])
  assert code == cli.EXIT_USAGE
  assert capsys.readouterr().err == (
      "error: invalid config: --max_epochs=some: max_epochs='some' is not an int; unknown key "
      f"model.hiden in {path}; did you mean model.hidden?; model.dropout must be in [0, 1), got "
      f"1.5 (in {path})\n")
  path.write_text("def get_config():\n  return {'schedule': 'linear', 'buckets': (64, 8)}\n")
  assert cli.run(train.main, ["--workdir=w", f"--config={path}", "--members=0"]) == 2
  assert capsys.readouterr().err == (
      f"error: invalid config: schedule='linear' is not one of plateau, cosine (in {path}); "
      f"members must be positive, got 0; buckets=(64, 8) must be positive padded lengths in "
      f"increasing order (in {path})\n")
  assert not pathlib.Path("w").exists()


def test_the_shipped_models_config_still_loads():
  saved = json.loads((GUM / "config.json").read_text())
  assert ParserModelConfig.from_json(saved["model"]) == ParserModelConfig(**saved["model"])
  with pytest.raises(ConfigError, match=r"unknown key hiden in x/config.json; did you mean "
                                        r"hidden\?"):
    ParserModelConfig.from_json({**saved["model"], "hiden": 2}, source="x/config.json")
