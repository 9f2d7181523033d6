"""Downstream end to end (issue #17): tiny runs of the embedded corpus, fixture files in the Hub
layouts, all 11 multiple-choice tasks, XSum and BoolQ fine-tuning for 2 seeds, generation and
ROUGE, through the two CLIs (`slm_jax.finetune`, `slm_jax.evaluate --tasks=mc,xsum,boolq`), into
results.json, tables.md and downstream.png. Absolute scores are near chance; the pipeline is the
point. The evaluator's resumability and its input errors are checked on the same runs."""

from __future__ import annotations

import json

import pytest

from tests.downstream_fixtures import write_fixtures
from tests.test_train import small_config
from slm_jax import evaluate
from slm_jax.finetune import __main__ as finetune_cli
from slm_jax.downstream.example import MC_TASKS
from slm_jax.train import trainer


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  root = tmp_path_factory.mktemp("downstream")
  data = root / "data"
  write_fixtures(data, rows_per_split=4)
  runs = {}
  for name in ("terminal", "tgtree"):
    runs[name] = root / name
    trainer.train(small_config(name, steps=2, **{"train.checkpoint_every": 2}), runs[name])
  finetuned = {}
  for name, workdir in runs.items():
    for task in ("xsum", "boolq"):
      out = root / f"{name}_{task}"
      assert finetune_cli.main([f"--task={task}", f"--workdir={workdir}", f"--out={out}",
                                f"--data_dir={data / task}", "--seeds=42,2026", "--epochs=1",
                                "--batch_size=2", "--limit=4", "--warmup_steps=1",
                                "--max_len=256", "--tree_source=flat"]
                               + ["--xsum_train=full"] * (task == "xsum")) == 0  # short rows
      finetuned[name, task] = out
  return root, data, runs, finetuned


def _evaluate(root, data, runs, finetuned, out, *extra):
  names = list(runs)
  return evaluate.main(
      [f"--workdir={runs[n]}" for n in names] + [
          "--tasks=mc,xsum,boolq", f"--downstream_dir={data}", f"--out={out}",
          "--tree_source=flat", "--max_items=2", "--gen_beam=2", "--gen_max_tokens=6",
          "--gen_max_words=4", "--bootstrap_resamples=200",
          "--mc_format=olmes"]  # the fixtures lack the paper format's fixed shot rows
      + [f"--xsum_finetuned={finetuned[n, 'xsum']}" for n in names]
      + [f"--boolq_finetuned={finetuned[n, 'boolq']}" for n in names] + list(extra))


@pytest.mark.slow  # two tiny runs, 8 fine-tuning seeds, 22 task evaluations (~90 s)
def test_all_tasks_fine_tuning_generation_tables_and_chart(setup):
  root, data, runs, finetuned = setup
  out = root / "eval"
  assert _evaluate(root, data, runs, finetuned, out) == 0
  results = json.loads((out / "results.json").read_text())
  for model in results["models"]:
    downstream = model["downstream"]
    assert sorted(downstream["mc"]) == sorted(MC_TASKS)
    for task, entry in downstream["mc"].items():
      assert entry["n"] == 2 and len(entry["correct"]) == 2, task
      assert 0 <= entry["accuracy"] <= 100
    assert sorted(downstream["xsum"]["seeds"]) == ["2026", "42"]
    for seed in downstream["xsum"]["seeds"].values():
      assert seed["n"] == 2 and 0 <= seed["ravg"] <= 100
    assert sorted(downstream["boolq_ft"]["seeds"]) == ["2026", "42"]
  tree = results["models"][1]["downstream"]
  assert tree["tree_source"] == "flat" and results["models"][0]["downstream"]["tree_source"] is None
  assert results["bootstrap_downstream"]["macro"]
  tables = (out / "tables.md").read_text()
  for title in ("Table 5", "Table 4", "R-AVG", "Tables 10/11"):
    assert title in tables, title
  assert (out / "downstream.png").stat().st_size > 0
  # A second run over the same folder resumes: every item and summary is read back, none redone.
  lines = {p: p.read_text() for p in (out / "downstream").rglob("*.jsonl")}
  assert len(lines) == 2 * (len(MC_TASKS) + 2 + 2)
  # (--articles_per_batch is speed and memory only: not part of what the summaries record)
  assert _evaluate(root, data, runs, finetuned, out, "--articles_per_batch=1") == 0
  assert {p: p.read_text() for p in lines} == lines
  again = json.loads((out / "results.json").read_text())["models"][0]["downstream"]["mc"]
  untimed = lambda mc: {t: {k: v for k, v in e.items() if k != "seconds"} for t, e in mc.items()}
  assert untimed(again) == untimed(results["models"][0]["downstream"]["mc"])


@pytest.fixture(scope="module")
def one_run(tmp_path_factory):
  """A 2-step terminal run and the fixture data: what the input checks read."""
  root = tmp_path_factory.mktemp("downstream_inputs")
  write_fixtures(root / "data", rows_per_split=1)
  trainer.train(small_config("terminal", steps=2, **{"train.checkpoint_every": 2}),
                root / "terminal")
  return root, root / "data", {"terminal": root / "terminal"}


def test_input_errors_are_one_line_before_anything_runs(one_run, capsys):
  root, data, runs = one_run
  from slm_jax import cli
  assert cli.run(evaluate.main, [f"--workdir={runs['terminal']}", "--tasks=mc",
                                 f"--out={root / 'e1'}"]) == 2
  assert "--downstream_dir" in capsys.readouterr().err
  for argv, named in ((["--tasks=xsum", f"--downstream_dir={data}"], "--xsum_finetuned"),
                      (["--tasks=mc", "--mc_tasks=arc_easy,squad", f"--downstream_dir={data}"],
                       "squad")):
    with pytest.raises(SystemExit) as stop:  # usage errors: one line, exit 2 (slm_jax.cli)
      evaluate.main([f"--workdir={runs['terminal']}", f"--out={root / 'e2'}", *argv])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert named in err and len(err.splitlines()) == 1
  assert not (root / "e1" / "downstream").exists() and not (root / "e2").exists()
