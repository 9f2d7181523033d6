"""train.models: the one answer to "which model is this path?" (issue 45 item 3), and the CLIs
that read a model through it (`--checkpoint` of export, evaluate, gtca)."""

from __future__ import annotations

import json
import pathlib

import pytest

from slm_jax import cli, export
from slm_jax.train import models


def _hf_folder(path: pathlib.Path, max_positions: int = 512) -> pathlib.Path:
  path.mkdir()
  (path / "config.json").write_text(json.dumps({"max_position_embeddings": max_positions}))
  (path / "model.safetensors").write_bytes(b"")
  return path


def _workdir(path: pathlib.Path) -> pathlib.Path:
  (path / "checkpoints").mkdir(parents=True)
  (path / "config.json").write_text("{}")
  return path


def test_each_kind_is_told_by_what_the_path_holds(tmp_path):
  assert models.model_kind(_workdir(tmp_path / "run")) == models.WORKDIR
  assert models.model_kind(_hf_folder(tmp_path / "hf")) == models.HF_FOLDER
  gguf = tmp_path / "m.gguf"
  gguf.write_bytes(b"GGUF")
  assert models.model_kind(gguf) == models.GGUF
  assert models.model_context(tmp_path / "hf") == 512


@pytest.mark.parametrize("make, message", [
    (lambda p: p / "missing", "no such folder or file"),
    (lambda p: p / "missing.gguf", "no such GGUF file"),
    (lambda p: (p / "empty").mkdir() or p / "empty", "not a model — a training workdir has"),
    (lambda p: (p / "t.json").write_text("{}") and p / "t.json", "not a model"),
])
def test_anything_else_is_one_line_saying_what_each_kind_needs(tmp_path, make, message):
  with pytest.raises(models.ModelPathError, match=message) as error:
    models.model_kind(make(tmp_path), "--checkpoint")
  assert "\n" not in str(error.value) and str(error.value).startswith("--checkpoint=")


def test_export_reads_its_checkpoint_through_the_resolver(tmp_path, capsys):
  hf = _hf_folder(tmp_path / "hf")
  with pytest.raises(cli.CliError, match="already a Hugging Face folder: nothing to export"):
    export.main([f"--checkpoint={hf}", f"--out={tmp_path / 'out'}"])
  with pytest.raises(cli.CliError, match="not a model"):
    export.main([f"--workdir={tmp_path}", f"--out={tmp_path / 'out'}"])
  assert "--workdir is the old spelling of --checkpoint" in capsys.readouterr().err


def test_evaluate_takes_a_workdir_as_checkpoint_as_a_trained_run(tmp_path, capsys):
  from slm_jax import evaluate  # pylint: disable=import-outside-toplevel
  run = _workdir(tmp_path / "run")
  args = evaluate.parse_args([f"--checkpoint={run}", "--tasks=blimp", f"--out={tmp_path / 'o'}"])
  assert args.models.workdirs == (str(run),) and args.models.checkpoints == ()
  assert "evaluated as a trained run" in capsys.readouterr().out
