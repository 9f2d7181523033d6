"""`gtca.train --config=…`: precedence, validation before anything runs, the packaged configs,
and the CLI run end to end (one config, flags on top; the three chained stages with their
printed frozen-backbone lines in the slow test)."""

from __future__ import annotations

import json
import types

import pytest
from flax import nnx

from slm_jax import cli
from slm_jax.config_files import ConfigError
from slm_jax.gtca import plans, run_config, train
from slm_jax.gtca import backbone as gbackbone
from slm_jax.identity import IdentityError
from slm_jax.model.config import ModelConfig
from slm_jax.model.decoder import Decoder
from slm_jax.tokenizer import Tokenizer, WordVocab


def _write(path, body: str):
  path.write_text("import ml_collections\n\ndef get_config():\n"
                  "  c = ml_collections.ConfigDict()\n" + body + "  return c\n")
  return path


def _load(config=None, flags=None, overrides=()):
  return train.CONFIG.load(config, list(overrides), flags or {})


def test_file_then_flags_then_overrides(tmp_path):
  path = _write(tmp_path / "c.py", "  c.backbone = 'runs/b'\n  c.out = 'o'\n  c.lr = 3e-3\n"
                "  c.seeds = (0, 1)\n  c.methods = 'gtca,lora_only'\n  c.lora_rank = 4\n")
  config = _load(str(path), {"lr": "5e-3", "stage_steps": "1,2,3"},
                 ["--config.batch_size=8", "--config.seeds=3", "--config.blimp_pairs=false"])
  assert config.backbone == "runs/b" and config.lr == 5e-3  # the flag beats the file
  assert config.seeds == (3,) and config.methods == ("gtca", "lora_only")
  assert config.stage_steps == (1, 2, 3) and config.batch_size == 8
  assert config.lora_rank == 4 and config.blimp_pairs is False
  assert config.alpha == plans.ALPHA and config.option_order == "random"  # Settings' defaults
  runs = run_config.run_settings(config, n_options=2)
  assert [(name, s.seed) for name, s in runs] == [("gtca", 3), ("lora_only", 3)]
  settings = runs[1][1]
  assert type(settings) is plans.Settings and settings.method == "lora_only"
  assert settings.out == "o/lora_only/seed3" and settings.lora_rank == 4
  assert settings.stage_steps == (1, 2, 3) and settings.lr == 5e-3


def test_unknown_keys_and_wrong_types_are_refused_naming_them(tmp_path):
  path = _write(tmp_path / "bad.py", "  c.backbone = 'b'\n  c.out = 'o'\n  c.learning_rate = 1\n"
                "  c.batch_size = 'big'\n  c.seeds = 'a,b'\n")
  with pytest.raises(ConfigError) as error:
    _load(str(path))
  text = str(error.value)
  assert f"unknown key learning_rate in {path}" in text
  assert f"{path}: seeds='a,b' is not a comma-separated list of int" in text
  with pytest.raises(ConfigError, match=r"batch_size = 'big' should be of type int, got str \(in "):
    _load(str(_write(tmp_path / "bad2.py", "  c.backbone = 'b'\n  c.out = 'o'\n"
                     "  c.batch_size = 'big'\n")))
  with pytest.raises(ConfigError, match=r"unknown key stage_step in --config.stage_step=1,1,1; "
                                        r"did you mean stage_steps\?"):
    _load(None, {"backbone": "b", "out": "o"}, ["--config.stage_step=1,1,1"])
  with pytest.raises(ConfigError, match="lr='fast' is not a float"):
    _load(None, {"backbone": "b", "out": "o"}, ["--config.lr=fast"])
  with pytest.raises(ConfigError, match=r"missing key backbone \(--backbone="):
    _load(None, {"out": "o"})
  with pytest.raises(ConfigError, match="config file no_such_config not found"):
    _load("no_such_config")
  broken = tmp_path / "broken.py"
  broken.write_text("def get_config():\n  return 1 / 0\n")
  with pytest.raises(ConfigError, match=f"{broken}: cannot run"):
    _load(str(broken))
  with pytest.raises(ConfigError, match="unknown method or ablation 'gtcaa'"):
    _load(None, {"backbone": "b", "out": "o", "methods": "gtca,gtcaa"})


def test_the_packaged_toy_config_keeps_its_values():
  config = _load("toy")
  assert config.methods == ("backbone", "lora_only", "direct_joint", "gtca", "no_gate",
                            "no_mask", "right_branching", "random_trees", "permuted_trees")
  assert (config.seeds, config.stage_steps, config.batch_size, config.lr) == (
      (0, 1, 2, 3, 4), (150, 150, 150), 16, 3e-3)
  assert (config.option_order, config.log_every, config.jit_cache, config.backbone,
          config.out) == ("fixed", 150, "gtca_runs/jit_cache", "runs/terminal_tiny",
                          "gtca_runs/toy")


# every old flag, as the train CLI spelled it, sets the key of its name (the same config as
# --config.KEY=VALUE)
FLAG_VALUES = {"backbone": "b2", "out": "o2", "methods": "gtca,no_mask", "seeds": "3,4",
               "stage_steps": "5,6,7", "batch_size": "4", "lr": "0.002", "alpha": "0.1",
               "train_items": "8", "dev_items": "3", "test_items": "5", "task_seed": "9",
               "option_order": "fixed", "task": "mmlu", "data_root": "d2", "cache": "c2",
               "log_every": "2", "jit_cache": "j", "weak_parser": "w2",
               "shared_cross_attention": "true"}


@pytest.mark.parametrize("flag", sorted(train.FLAGS))
def test_each_old_flag_spelling_is_an_alias_of_its_key(flag):
  base = {"backbone": "b", "out": "o", "data_root": "d", "cache": "c"}
  by_flag = _load(None, {**base, flag: FLAG_VALUES[flag]})
  by_key = _load(None, base, [f"--config.{flag}={FLAG_VALUES[flag]}"])
  assert by_flag == by_key and by_flag != _load(None, base)
  args = train.cli.ArgumentParser()
  train.CONFIG.add_config_argument(args)
  for name in train.FLAGS:
    args.add_argument(f"--{name}", default=None)
  parsed = args.parse_args([f"--{flag}={FLAG_VALUES[flag]}"])
  assert train.CONFIG.flag_values(parsed) == {flag: FLAG_VALUES[flag]}


@pytest.mark.parametrize("name", run_config.names())
def test_every_packaged_config_builds_its_runs(name):
  config = _load(name)
  assert config.methods and config.seeds
  runs = run_config.run_settings(config, n_options=2)
  assert len(runs) == len(config.methods) * len(config.seeds)
  assert set(run_config.names()) >= {"toy", "mmlu_qwen"}


# ---- the CLI ---------------------------------------------------------------------------------
@pytest.fixture()
def workdir(tmp_path, monkeypatch):
  """A word-level backbone behind a patched `load_run` (no trained workdir needed)."""
  tokenizer = Tokenizer(WordVocab(["<unk>", "the", ".", "is", "are", "keys", "key"]))
  model = Decoder(ModelConfig(vocab_size=tokenizer.vocab_size, d_model=16, n_layers=2,
                              n_heads=2, mlp_ratio=2), rngs=nnx.Rngs(0))
  fake = lambda path, *a, **k: types.SimpleNamespace(model=model, tokenizer=tokenizer, step=0)  # noqa
  monkeypatch.setattr(train, "load_run", fake)
  monkeypatch.setattr(gbackbone, "load_run", fake)
  folder = tmp_path / "backbone"
  folder.mkdir()
  return folder


def _config(tmp_path, workdir, methods: str):
  return _write(tmp_path / "run.py", f"  c.backbone = {str(workdir)!r}\n"
                f"  c.out = {str(tmp_path / 'runs')!r}\n  c.methods = {methods!r}\n"
                "  c.seeds = (0, 1)\n  c.train_items = 8\n  c.dev_items = 2\n"
                "  c.test_items = 4\n  c.blimp_pairs = False\n  c.stage_steps = (1, 1, 1)\n"
                "  c.batch_size = 2\n  c.log_every = 1\n")


def test_the_cli_runs_a_config_with_flags_on_top(tmp_path, workdir, capsys):
  path = _config(tmp_path, workdir, "backbone")
  assert train.main([f"--config={path}", "--seeds=1", "--config.task_seed=2"]) == 0
  printed = capsys.readouterr().out
  assert "config: " in printed and "seeds=1 " in printed and "task_seed=2 " in printed
  assert not (tmp_path / "runs" / "backbone" / "seed0").exists()  # --seeds overrode (0, 1)
  result = json.loads((tmp_path / "runs" / "result.json").read_text())  # one run: OUT itself
  assert result["settings"]["task_seed"] == 2 and result["settings"]["train_items"] == 8
  # every run is validated before the first starts: a bad method stops the sweep at once
  with pytest.raises(ConfigError, match="unknown method or ablation 'gtcaa'"):
    train.main([f"--config={path}", "--methods=backbone,gtcaa"])
  assert not (tmp_path / "runs" / "backbone").exists()
  with pytest.raises(ConfigError, match="option_order 'sorted'"):
    train.main([f"--config={path}", "--config.option_order=sorted"])
  with pytest.raises(SystemExit):  # an argument that is neither a flag nor --config.KEY=VALUE
    train.main([f"--config={path}", "--nonsense=1"])


def test_the_sweep_reuses_a_finished_run_only_under_its_settings(tmp_path, workdir, capsys):
  """A finished run (result.json + identity.json) is reused by the same command; under other
  settings it is refused naming the differing key (never "exists, skipped")."""
  path = _config(tmp_path, workdir, "backbone")
  assert train.main([f"--config={path}"]) == 0
  capsys.readouterr()
  assert train.main([f"--config={path}", "--log_every=5"]) == 0  # cadence may change
  printed = capsys.readouterr().out
  assert "[1/2] backbone seed 0: finished earlier" in printed and "reused" in printed
  with pytest.raises(IdentityError, match=r"seed0 holds another backbone seed 0 \("
                                          r"settings.task_seed: 0 recorded there, 4 now\)"):
    train.main([f"--config={path}", "--task_seed=4"])
  (tmp_path / "runs" / "backbone" / "seed1" / "identity.json").unlink()
  with pytest.raises(IdentityError, match="finished .* but without its record"):
    train.main([f"--config={path}"])


@pytest.mark.slow  # the three stages compiled once each on 2 cores (~40 s)
def test_the_cli_chains_three_stages_and_prints_the_frozen_check(tmp_path, workdir, capsys):
  path = _config(tmp_path, workdir, "gtca")
  assert train.main([f"--config={path}", "--seeds=0"]) == 0
  printed = capsys.readouterr().out.splitlines()
  for stage in ("1 (lora)", "2 (gtca)", "3 (joint)"):
    line = next(x for x in printed if x.startswith(f"stage {stage} backbone: "))
    assert "bitwise equal to the loaded ones" in line, line
  result = json.loads((tmp_path / "runs" / "result.json").read_text())
  assert [s["stage"] for s in result["stages"]] == ["lora", "gtca", "joint"]
  assert (tmp_path / "runs" / "stage2_only" / "result.json").is_file()
  for directory in ("stage1_lora", "stage2_gtca", "stage3_joint"):
    assert (tmp_path / "runs" / directory / "1").is_dir()
