"""`python -m slm_jax.evaluate` checks every input before it scores anything, never writes into a
training workdir (a corrupt newest checkpoint is skipped and reported, not moved), writes strict
JSON, and keeps the runs already scored when a later one fails."""

from __future__ import annotations

import json
import math
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from slm_jax import cli, evaluate, locks
from slm_jax.eval import report
from slm_jax.evaluation import inputs, run as evaluation_run
from slm_jax.train import trainer
from tests.test_files import fill_disk
from tests.test_train import small_config


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("terminal")
  trainer.train(small_config("terminal", steps=4, **{"train.checkpoint_every": 2}), workdir)
  return workdir


def snapshot(folder: pathlib.Path) -> dict[str, tuple[int, int]]:
  return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
          for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("flag", ["--max_items=-1", "--max-items=0", "--tasks=", "--tasks=,",
                                  "--proposals=0", "--beam=0", "--batch_size=0",
                                  "--max_len_factor=0", "--sentences_per_batch=0",
                                  "--articles_per_batch=0"])
def test_bad_numbers_and_empty_tasks_are_usage_errors(flag, tmp_path, capsys):
  with pytest.raises(SystemExit) as exit_info:
    evaluate.parse_args([f"--workdir={tmp_path}", f"--out={tmp_path / 'o'}", flag])
  assert exit_info.value.code == cli.EXIT_USAGE
  assert flag.split("=")[0].lstrip("-").replace("-", "_") in capsys.readouterr().err.replace(
      "-", "_")


def test_every_input_is_checked_before_scoring(run, tmp_path):
  empty = tmp_path / "not_a_run"
  empty.mkdir()
  out_file = tmp_path / "out.txt"
  out_file.write_text("x")
  args = evaluate.parse_args([f"--workdir={run}", f"--workdir={empty}",
                              f"--workdir={tmp_path / 'missing'}", "--tasks=blimp,docppl",
                              "--blimp_proposals=/no/such/kbest.txt",
                              "--docppl_ptb=/no/such/file.mrg", f"--out={out_file}"])
  with pytest.raises(cli.CliError) as error:
    inputs.check_inputs(args)
  message = str(error.value)
  for expected in ("not_a_run", "missing", "/no/such/kbest.txt", "/no/such/file.mrg",
                   "out.txt: exists and is not a folder"):
    assert expected in message
  assert "\n" not in message  # one line


def test_a_workdir_without_checkpoints_is_refused(run, tmp_path):
  bare = tmp_path / "bare"
  bare.mkdir()
  (bare / "config.json").write_text((run / "config.json").read_text())
  args = evaluate.parse_args([f"--workdir={bare}", f"--out={tmp_path / 'o'}"])
  with pytest.raises(cli.CliError, match="no checkpoint"):
    inputs.check_inputs(args)
  assert not (tmp_path / "o").exists()


def test_evaluation_is_read_only_and_says_which_step_it_used(run, tmp_path, capsys):
  copy = tmp_path / "run"
  import shutil
  shutil.copytree(run, copy)
  for path in (copy / "checkpoints" / "4" / "state").rglob("*"):
    if path.is_file():
      path.write_bytes(b"corrupt")
  before = snapshot(copy)
  out = tmp_path / "report"
  code = evaluate.main([f"--workdir={copy}", "--tasks=docppl", f"--out={out}",
                        "--docppl_documents=1", "--bootstrap_resamples=10"])
  assert code == 0
  assert snapshot(copy) == before  # nothing created, moved or rewritten in the workdir
  model = json.loads((out / "results.json").read_text())["models"][0]
  assert model["step"] == 2 and model["newest_checkpoint_step"] == 4
  assert model["skipped_checkpoints"][0]["step"] == 4
  assert "not the newest checkpoint" in capsys.readouterr().err
  assert not (out / "results.partial.json").exists()


def test_results_json_is_strict(tmp_path):
  path = tmp_path / "r.json"
  report.write_json({"a": float("nan"), "b": [1.0, float("inf"), np.float32(2.5)],
                     "c": {"d": np.array([np.nan, 1.0])}}, path)
  def refuse(token):
    raise AssertionError(f"non-standard JSON token {token}")
  data = json.loads(path.read_text(), parse_constant=refuse)
  assert data == {"a": None, "b": [1.0, None, 2.5], "c": {"d": [None, 1.0]}}
  assert not any(isinstance(v, float) and math.isnan(v) for v in data["b"])


def test_runs_scored_before_a_failure_are_kept(run, tmp_path, monkeypatch):
  real = evaluation_run.evaluate_run
  calls = []

  def second_fails(workdir, args, data, index, **kwargs):
    calls.append(workdir)
    if len(calls) == 2:
      raise RuntimeError("device lost")
    return real(workdir, args, data, index, **kwargs)

  monkeypatch.setattr(evaluation_run, "evaluate_run", second_fails)
  out = tmp_path / "report"
  with pytest.raises(RuntimeError, match="device lost"):
    evaluate.main([f"--workdir={run}", f"--workdir={run}", "--tasks=docppl", f"--out={out}",
                   "--docppl_documents=1"])
  partial = json.loads((out / "results.partial.json").read_text())
  assert partial["complete"] is False and len(partial["models"]) == 1
  assert partial["models"][0]["docppl"]["ppl"] > 1
  # issue #47: the rerun keeps the run finished before (same step, same content digest)
  calls.clear()
  monkeypatch.setattr(evaluation_run, "evaluate_run",
                      lambda *a, **k: calls.append(a[0]) or real(*a, **k))
  evaluate.main([f"--workdir={run}", f"--workdir={run}", "--tasks=docppl", f"--out={out}",
                 "--docppl_documents=1"])
  assert len(calls) == 1  # only the run that had failed
  models = json.loads((out / "results.json").read_text())["models"]
  assert models[0]["docppl"] == partial["models"][0]["docppl"] and len(models) == 2


def test_a_proposals_file_that_misses_sentences_is_refused_before_scoring(tmp_path,
                                                                         monkeypatch):
  from tests.test_blimp import write_blimp
  tree_run = tmp_path / "tree"
  trainer.train(small_config("tree", steps=2), tree_run)
  write_blimp(tmp_path / "blimp", {"p_a": [("Cats chase mice.", "Mice cats chase.")]})
  kbest = tmp_path / "kbest.txt"
  kbest.write_text("(S (NP Cats) (VP chase (NP mice)) .)\n\n")  # the bad sentence is missing
  scored = []
  monkeypatch.setattr(evaluation_run, "evaluate_run", lambda *a: scored.append(a))
  with pytest.raises(cli.CliError, match=r"no proposals for 1 of 2 sentences .*Mice cats chase"):
    evaluate.main([f"--workdir={tree_run}", "--tasks=blimp", f"--out={tmp_path / 'o'}",
                   f"--blimp_dir={tmp_path / 'blimp'}", f"--blimp_proposals={kbest}"])
  assert not scored


def _finetune_folder(path: pathlib.Path, source: pathlib.Path | None, task: str = "boolq"):
  (path / "seed42").mkdir(parents=True)
  settings = {"task": task} | ({"source": str(source.resolve())} if source else {})
  (path / "seed42" / "finetune.json").write_text(json.dumps({"settings": settings, "seed": 42}))
  return path


def test_a_fine_tune_of_another_run_or_order_is_refused(run, tmp_path):
  """BAD 3: each --boolq_finetuned/--xsum_finetuned folder must name its --workdir as source."""
  other = tmp_path / "other_run"
  other.mkdir()
  mine = _finetune_folder(tmp_path / "ft_mine", run)
  theirs = _finetune_folder(tmp_path / "ft_theirs", other)
  assert inputs.finetune_source_problems("boolq", str(mine), [str(run)], 0) == []
  problems = inputs.finetune_source_problems("boolq", str(theirs), [str(run)], 0)
  assert problems == [f"--boolq_finetuned={theirs}: seed42 is a fine-tune of "
                      f"{other.resolve()}, not of --workdir #1 {run}"]
  swapped = inputs.finetune_source_problems("boolq", str(mine), [str(other), str(run)], 0)
  assert "that is --workdir #2: give the --boolq_finetuned folders in the --workdir order" in (
      swapped[0])
  unnamed = _finetune_folder(tmp_path / "ft_old", None)
  assert "names no source run" in inputs.finetune_source_problems("boolq", str(unnamed),
                                                                  [str(run)], 0)[0]
  (tmp_path / "data").mkdir()
  args = evaluate.parse_args([f"--workdir={run}", "--tasks=boolq", f"--boolq_finetuned={theirs}",
                              f"--downstream_dir={tmp_path / 'data'}", f"--out={tmp_path / 'o'}"])
  with pytest.raises(cli.CliError, match=r"seed42 is a fine-tune of .*other_run, not of"):
    inputs.check_inputs(args)


def test_a_second_evaluation_into_one_out_is_refused(run, tmp_path, capsys):
  """BAD 6: `--out` in use by another evaluation → one line naming its pid, nothing written."""
  out = tmp_path / "report"
  out.mkdir()
  holder = subprocess.Popen([sys.executable, "-c", "import sys, time\n"
                             "from slm_jax.locks import writer_lock\n"
                             "with writer_lock(sys.argv[1], what='evaluation'):\n"
                             "  print('held', flush=True); time.sleep(60)\n", str(out)],
                            stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline().strip() == "held"
    code = cli.run(evaluate.main, [f"--workdir={run}", "--tasks=docppl", f"--out={out}",
                                   "--docppl_documents=1"])
    err = capsys.readouterr().err.strip()
    assert code == cli.EXIT_USAGE
    error = next(line for line in err.splitlines() if line.startswith("error: "))
    assert error.startswith(f"error: {out}: in use by pid {holder.pid}") and "(evaluation)" in error
    assert sorted(p.name for p in out.iterdir()) == [".lock"]
    assert locks.read_lock(out)["pid"] == holder.pid
  finally:
    holder.kill()
    holder.wait()


def test_a_failed_write_of_a_partial_file_leaves_the_old_one(tmp_path, monkeypatch):
  """WEAK: a full disk left a 0-byte results.partial.json; now the old file stays, and the
  error names the file."""
  path = tmp_path / "results.partial.json"
  report.write_json({"models": [1]}, path)
  fill_disk(monkeypatch)  # the file is opened (truncated), then its write fails
  with pytest.raises(OSError, match=r"No space left on device.*results.partial.json"):
    report.write_json({"models": [1, 2]}, path)
  monkeypatch.undo()
  assert json.loads(path.read_text()) == {"models": [1]}
  assert sorted(p.name for p in tmp_path.iterdir()) == ["results.partial.json"]
