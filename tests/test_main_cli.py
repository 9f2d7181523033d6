"""`python -m slm_jax.main` fails with one line and exit 2 on every kind of bad input (no
traceback; `--debug` shows it), and accepts a packaged config name."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.test_train import ROOT


def main(*args: str):
  return subprocess.run([sys.executable, "-m", "slm_jax.main", *args], cwd=ROOT,
                        capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("args, message", [
    (("--config=configs/tg_tiny.py", "--config.model.d_modle=3"),
     "unknown key model.d_modle in --config.model.d_modle=3; did you mean model.d_model?"),
    (("--config=configs/nope.py",), "config file configs/nope.py not found"),
    (("--config=configs/tg_tiny.py", "--config.train.steps=abc"),
     "invalid config: --config.train.steps=abc: train.steps='abc' is not an int"),
    (("--config=configs/tg_tiny.py", "--bogus"), "Unknown command line flag 'bogus'"),
    (("--config=configs/tree_tiny.py", "--config.configuration.attention=tg"),
     "attention tg needs linearization lin2"),
    (("--config=configs/tg_tiny.py", "--config.data.seq_len=8", "--config.optimizer.min_lr=9.0"),
     "seq_len must be at least 16, got 8; optimizer.min_lr=9.0 must be in [0, peak_lr]"),
    ((), "--config is required"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
  done = main(*args, f"--workdir={tmp_path / 'w'}")
  assert done.returncode == 2, done.stderr
  assert "Traceback" not in done.stderr
  errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
  assert len(errors) == 1 and message in errors[0], done.stderr
  assert not (tmp_path / "w").exists()  # nothing written


def test_debug_shows_the_traceback(tmp_path):
  done = main("--config=configs/tree_tiny.py", "--config.configuration.attention=tg", "--debug",
              f"--workdir={tmp_path / 'w'}")
  assert done.returncode != 0 and "Traceback" in done.stderr and "ConfigError" in done.stderr


def test_a_config_file_s_problems_name_it_in_one_line(tmp_path):
  config = tmp_path / "mine.py"
  config.write_text("from slm_jax.train import run_config\n\ndef get_config():\n"
                    "  cfg = run_config.build('tg', 'tiny')\n"
                    "  with cfg.unlocked():\n    cfg.train.stepz = 3\n  return cfg\n")
  done = main(f"--config={config}", "--config.train.steps=abc", f"--workdir={tmp_path / 'w'}")
  assert done.returncode == 2 and done.stderr.splitlines() == [
      f"error: invalid config: --config.train.steps=abc: train.steps='abc' is not an int; "
      f"unknown key train.stepz in {config}; did you mean train.steps?"]
  assert not (tmp_path / "w").exists()
