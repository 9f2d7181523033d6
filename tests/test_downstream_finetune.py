"""XSum / BoolQ fine-tuning: the loss mask, truncation, the schedule, a tiny run that learns, exact
resume after a stop, the seed-folder workdir `load_run` reads, and the CLI's one-line errors."""

from __future__ import annotations

import json
import socket
import re
import subprocess
import sys

import jax
import numpy as np
import pytest
from flax import nnx

from tests.test_train import ROOT, small_config
from slm_jax import cli
from slm_jax.finetune import __main__ as finetune_cli
from slm_jax.configurations import get_configuration
from slm_jax.finetune import trainer as finetune
from slm_jax.downstream.encoding import TextEncoder, make_tree_source
from slm_jax.downstream.example import TaskExample
from slm_jax.downstream.finetune_data import (FinetuneBatches, encode_rows, task_row,
                                              truncation_keep)
from slm_jax.kinds import Kind
from slm_jax.structure import target_mask
from slm_jax.train import trainer
from slm_jax.train.loading import load_run
from slm_jax.train.optimizer import make_schedule

ARTICLE = "The company said it would buy the firm . Its shares rose on Monday ."
SUMMARY = "The company bought the firm ."


@pytest.fixture(scope="module")
def source(tmp_path_factory):
  """A tree run trained 2 steps on the embedded corpus, loaded as fine-tuning starts from it."""
  workdir = tmp_path_factory.mktemp("tree_run")
  trainer.train(small_config("tree", steps=2, **{"train.checkpoint_every": 2}), workdir)
  return workdir, load_run(workdir, dtype=None)


def xsum(i: int = 0, article: str = ARTICLE, summary: str = SUMMARY) -> TaskExample:
  return TaskExample("xsum", article, (summary,), 0, f"xsum:{i}")


def boolq(i: int = 0, answer: int = 1) -> TaskExample:
  return TaskExample("boolq", "is the firm sold", ("no", "yes"), answer, f"boolq:{i}",
                     passage="The company bought the firm on Monday .")


def encoder(loaded, configuration=None):
  return TextEncoder(loaded.tokenizer, configuration or loaded.configuration,
                     make_tree_source("flat")).encode


@pytest.mark.parametrize("configuration", ["tree", "tg", "terminal"])
def test_the_loss_mask_is_the_summary_and_eos_or_the_answer(source, configuration):
  _, loaded = source
  config = get_configuration(configuration)
  encode = encoder(loaded, config)
  for example, component in ((xsum(), 2), (boolq(), 1)):
    rows, _ = encode_rows([example], encode, max_len=512)
    task = task_row(example)
    encoded = encode(list(task.components), eos=task.eos)
    batch = FinetuneBatches(rows, 1, 0, config, loaded.tokenizer.pad_id, 512).batch(0)
    n = len(encoded)
    kinds = np.asarray(encoded.sequence.kinds)
    in_component = (encoded.component_T == component) | (kinds == Kind.EOS)
    expected = target_mask(kinds[None], np.ones((1, n), np.int32), config.linearization,
                           config.attention)[0] & in_component
    assert batch.targets[0, :n].tolist() == expected.tolist()
    assert not batch.targets[0, n:].any() and (batch.meta.segment[0, n:] == 0).all()
    assert batch.tokens.shape[1] == 64  # bucketed
    if example.task == "xsum":
      assert kinds[batch.targets[0, :n]][-1] == Kind.EOS  # EOS is a target
    else:
      assert Kind.EOS not in kinds  # BoolQ: the answer ends the row
    if configuration == "tg":  # CNT2 stays out of the loss (SPEC §4)
      assert not (batch.targets[0, :n] & (kinds == Kind.CNT2)).any()
      assert (in_component & (kinds == Kind.CNT2)).any()
    if configuration == "tree":  # structure of the summary is trained on
      assert (batch.targets[0, :n] & (kinds == Kind.ONT)).any()
    assert batch.targets[0, :n].sum() == expected.sum() > 0


def test_truncation_cuts_the_articles_end_by_sentences_and_counts():
  component = np.array([-1, 0, 0, 0, 0, 0, 0, 1, 1, 2, 2, -1])
  sentence = np.array([0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 4])
  keep, cut = truncation_keep(component, sentence, 9, truncatable=0)
  assert keep.tolist() == [0, 1, 2, 7, 8, 9, 10, 11] and not cut  # sentences 1 and 2 dropped
  keep, cut = truncation_keep(component, sentence, 7, truncatable=0)
  assert keep.tolist() == [0, 1, 7, 8, 9, 10, 11] and cut  # inside the first sentence
  assert truncation_keep(component, sentence, 5, truncatable=0) == (None, False)
  assert truncation_keep(component, sentence, 9, truncatable=None) == (None, False)
  assert truncation_keep(component, sentence, 12, truncatable=0)[0].tolist() == list(range(12))


def test_encode_rows_counts_truncated_and_dropped(source):
  _, loaded = source
  encode = encoder(loaded)
  long_article = " ".join(["The company said it would buy the firm ."] * 30)
  examples = [xsum(0), xsum(1, article=long_article), xsum(2, article="  "),
              xsum(3, summary=" ".join(["the firm"] * 200)), boolq(4)]
  rows, stats = encode_rows(examples, encode, max_len=128)
  assert (stats.examples, stats.rows, stats.truncated, stats.dropped_empty,
          stats.dropped_too_long) == (5, 3, 1, 1, 1)
  assert stats.token_cut == 0 and stats.tokens_removed > 0 and stats.longest <= 128
  truncated = rows[1]
  assert len(truncated) <= 128 and truncated.kinds[-1] == Kind.EOS
  full = encode(list(task_row(xsum(1, article=long_article)).components), eos=True)
  kept_summary = truncated.loss.sum()
  assert kept_summary == ((full.component_T == 2) | (full.sequence.kinds == Kind.EOS)).sum()
  assert "1 truncated" in stats.summary()


def test_the_schedule_warms_up_then_decays_to_1e_6(source):
  _, loaded = source
  settings = finetune.FinetuneSettings("xsum", "x", epochs=3, lr=6e-5, batch_size=40)
  cfg = finetune.finetune_config(loaded, settings, total_steps=1000, seed=42)
  opt = cfg.optimizer
  assert (opt.b1, opt.b2, opt.weight_decay, opt.clip, opt.warmup_steps) == (0.9, 0.95, 0.1, 1.0,
                                                                           100)
  schedule = make_schedule(opt, 1000)
  assert float(schedule(1)) == pytest.approx(6e-7)
  assert float(schedule(50)) == pytest.approx(3e-5)
  assert float(schedule(100)) == pytest.approx(6e-5)
  assert float(schedule(550)) == pytest.approx((6e-5 + 1e-6) / 2)
  assert float(schedule(1000)) == pytest.approx(1e-6)
  values = [float(schedule(k)) for k in range(100, 1001)]
  assert all(a >= b for a, b in zip(values, values[1:]))
  assert cfg.train.seed == 42 and cfg.train.steps == 1000


def _rows(loaded):
  examples = [xsum(i, summary=s) for i, s in enumerate(
      ["The company bought the firm .", "Its shares rose on Monday .", "The firm said it would "
       "buy the company .", "Shares of the firm rose ."])]
  return encode_rows(examples, encoder(loaded), max_len=256)


def _settings(workdir, **extra):
  values = {"epochs": 1, "lr": 3e-3, "batch_size": 2, "max_len": 256, "warmup_steps": 0,
            "log_every": 1, "checkpoint_every": 100, "tree_source": "flat", **extra}
  return finetune.FinetuneSettings("xsum", str(workdir), **values)


XSUM_ROWS = [("The company said it would buy the firm .", "The company bought the firm ."),
             ("Its shares rose on Monday .", "Shares rose ."),
             ("The firm said it would buy the company .", "The firm bought it ."),
             ("Shares of the firm rose . The company said so .", "Shares of the firm rose .")]


def test_a_tiny_cli_run_lowers_its_loss_and_writes_loadable_seed_workdirs(source, tmp_path,
                                                                          capsys):
  workdir, _ = source
  data = tmp_path / "xsum"
  (data / "data").mkdir(parents=True)
  (data / "data" / "train.jsonl").write_text("".join(
      json.dumps({"document": d, "summary": s, "id": str(i)}) + "\n"
      for i, (d, s) in enumerate(XSUM_ROWS)))
  out = tmp_path / "out"
  argv = ["--task=xsum", f"--workdir={workdir}", f"--out={out}", f"--data_dir={data}",
          "--seeds=42,2026", "--epochs=2", "--batch_size=4", "--lr=3e-3", "--warmup_steps=0",
          "--max_len=256", "--tree_source=flat", "--log_every=1",
          "--xsum_train=full"]  # these short rows are outside the paper's subset (HELM filter)
  assert cli.run(finetune_cli.main, argv) == 0
  printed = capsys.readouterr().out
  assert "xsum train: 4 rows of 4 examples; 0 truncated" in printed
  assert "xsum seed 2026 step 2/2 | loss" in printed and "steps/s | lr" in printed
  for seed in (42, 2026):
    seed_dir = out / f"seed{seed}"
    lines = (seed_dir / "metrics.jsonl").read_text().splitlines()
    curve = [json.loads(line)["loss"] for line in lines]
    assert len(curve) == 2 and curve[1] < curve[0] - 0.1, curve  # the same 4 rows twice
    tuned = load_run(seed_dir)  # the seed folder is a workdir evaluation can load
    assert tuned.step == 2 and tuned.cfg.optimizer.peak_lr == 3e-3
    assert tuned.cfg.train.seed == seed and tuned.cfg.optimizer.min_lr == 1e-6
    record = json.loads((seed_dir / "finetune.json").read_text())
    assert record["source_step"] == 2 and record["rows"]["rows"] == 4 and record["steps"] == 2
    assert json.loads((seed_dir / "summary.json").read_text())["steps"] == 2
  assert cli.run(finetune_cli.main, argv) == 0  # finished seeds are reused
  assert capsys.readouterr().out.count("finished earlier") == 2


def test_stop_and_resume_gives_the_parameters_of_an_uninterrupted_run(source, tmp_path):
  workdir, loaded = source
  rows, stats = _rows(loaded)
  settings = _settings(workdir, epochs=2)  # 4 steps
  quiet = lambda _: 0
  finetune.finetune_seed(loaded, rows, stats, settings, 7, tmp_path / "whole", log=quiet)
  first = finetune.finetune_seed(loaded, rows, stats, settings, 7, tmp_path / "split",
                                 log=quiet, stop_after=2)
  assert first["steps"] == 2 and not (tmp_path / "split/seed7/summary.json").exists()
  second = finetune.finetune_seed(loaded, rows, stats, settings, 7, tmp_path / "split",
                                  log=quiet)
  assert second["resumed_from"] == 2 and second["steps"] == 4
  flat = lambda d: jax.tree.leaves(nnx.to_pure_dict(nnx.state(load_run(d).model, nnx.Param)))
  for a, b in zip(flat(tmp_path / "whole/seed7"), flat(tmp_path / "split/seed7")):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  losses = lambda d: [json.loads(l)["loss"] for l in (d / "metrics.jsonl").read_text().splitlines()]
  assert losses(tmp_path / "whole/seed7") == losses(tmp_path / "split/seed7")
  with pytest.raises(finetune.FinetuneMismatchError, match="lr"):  # another fine-tune
    finetune.finetune_seed(loaded, rows, stats, _settings(workdir, epochs=2, lr=1e-3), 7,
                           tmp_path / "split", log=quiet)


def _cli(*args):
  return subprocess.run([sys.executable, "-m", "slm_jax.finetune", *args], cwd=ROOT,
                        capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("args, message", [
    (("--task=xsum", "--workdir={run}", "--out={out}", "--bogus"), "unrecognized arguments"),
    (("--task=summarize", "--workdir={run}", "--out={out}"),
     "invalid config: task='summarize' is not one of xsum, boolq"),
    (("--task=xsum", "--workdir={tmp}/nope", "--out={out}", "--data_dir={tmp}"),
     "nope: no such folder"),
    (("--task=boolq", "--workdir={run}", "--out={out}", "--data_dir={tmp}/none"),
     "none: no such folder"),
    (("--task=xsum", "--workdir={run}", "--out={out}", "--data_dir={tmp}", "--seeds=4,x"),
     "--seeds='4,x': expected comma-separated integers"),
])
def test_bad_input_is_one_line_and_exit_2(source, tmp_path, args, message):
  run = source[0]
  done = _cli(*(a.format(run=run, out=tmp_path / "out", tmp=tmp_path) for a in args))
  assert done.returncode == cli.EXIT_USAGE, done.stderr
  assert "Traceback" not in done.stderr
  errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
  assert len(errors) == 1 and message in errors[0], done.stderr
  assert not (tmp_path / "out").exists()


def test_bad_settings_are_one_line_errors(source, tmp_path):
  code = cli.run(finetune_cli.main, ["--task=xsum", f"--workdir={source[0]}",
                                     f"--out={tmp_path / 'o'}", f"--data_dir={tmp_path}",
                                     "--batch_size=3", "--micro_batches=2"])
  assert code == cli.EXIT_USAGE and not (tmp_path / "o").exists()


def test_a_non_finite_loss_at_a_step_that_logs_nothing_saves_nothing_after_it(source, tmp_path):
  """Issue 32 case 2: the loss is checked at every step, not only at log steps; a checkpoint
  holding the parameters after the first non-finite loss is never written."""
  workdir, loaded = source
  rows, stats = _rows(loaded)
  settings = _settings(workdir, epochs=3, lr=1e30, clip=0.0, log_every=100, checkpoint_every=1)
  # the first non-finite value: a loss, or (lr 1e30) parameters an update overflowed while the
  # loss of that step, computed before the update, was still finite
  with pytest.raises(cli.CliError, match=r"seed 7 non-finite (loss .* at step|parameters after the "
                     r"update of step) \d+[; ].*stopping without saving \(last checkpoint: step \d"
                     ) as error:
    finetune.finetune_seed(loaded, rows, stats, settings, 7, tmp_path, log=lambda _: 0)
  assert error.value.exit_code == cli.EXIT_NONFINITE
  bad = int(re.search(r"(?:at|of) step (\d+)[;( ]", str(error.value)).group(1))
  assert bad < 6  # found at its step, not at the next log step (the last one, 6)
  checkpoints = tmp_path / "seed7" / "checkpoints"
  assert sorted(int(p.name) for p in checkpoints.iterdir() if p.name.isdigit()) == list(
      range(1, bad))
  assert not (tmp_path / "seed7" / "summary.json").exists()


def test_an_out_in_use_is_refused_before_any_data_is_read(source, tmp_path):
  """One writer per OUT: a second fine-tuning is refused at once (the data folder is not even
  read: it holds nothing here)."""
  run = source[0]
  out = tmp_path / "out"
  out.mkdir()
  (out / ".lock").write_text(json.dumps({"pid": 3, "host": "gpu-node", "started": "T",
                                         "what": "fine-tuning"}))
  (tmp_path / "data").mkdir()
  done = _cli("--task=boolq", f"--workdir={run}", f"--out={out}", f"--data_dir={tmp_path}/data")
  assert done.returncode == cli.EXIT_USAGE, done.stderr
  errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
  assert errors == [f"error: {out}: in use by pid 3 on gpu-node since T (fine-tuning); a lock "
                    f"from another host cannot be checked from {socket.gethostname()}: if that "
                    f"process has ended, delete {out / '.lock'} and rerun"]


def test_a_finished_seed_made_with_other_settings_is_refused_not_reused(source, tmp_path):
  """Issue 32 case 1: a finished seed folder is reused only when its finetune.json matches the
  command; otherwise every seed is refused before any trains, naming the differing keys."""
  workdir, loaded = source
  rows, stats = _rows(loaded)
  quiet = lambda _: 0
  done = finetune.finetune_seeds(loaded, rows, stats, _settings(workdir), [7], tmp_path, log=quiet)
  assert done[0]["steps"] == 2
  again = finetune.finetune_seeds(loaded, rows, stats, _settings(workdir, log_every=5), [7],
                                  tmp_path, log=quiet)  # a cadence change: reused
  assert again == done
  with pytest.raises(finetune.FinetuneMismatchError,
                     match=r"seed7 holds another fine-tune \(settings.lr: 0.003 in the seed "
                     r"folder, 0.001 now\)"):
    finetune.finetune_seeds(loaded, rows, stats, _settings(workdir, lr=1e-3), [8, 7], tmp_path,
                            log=quiet)
  assert not (tmp_path / "seed8").exists()  # refused before the first seed trained


def test_a_partly_written_metrics_line_does_not_block_resume(source, tmp_path, capsys):
  """Issue 32 case 13: a kill in the middle of writing metrics.jsonl leaves a partial last
  line; the resumed seed moves it to metrics.jsonl.dropped with a warning naming the line."""
  workdir, loaded = source
  rows, stats = _rows(loaded)
  settings = _settings(workdir, epochs=2)
  finetune.finetune_seed(loaded, rows, stats, settings, 7, tmp_path, log=print, stop_after=2)
  metrics = tmp_path / "seed7" / "metrics.jsonl"
  with metrics.open("a") as f:
    f.write('{"step": 3, "loss": 2.7')
  summary = finetune.finetune_seed(loaded, rows, stats, settings, 7, tmp_path, log=print)
  assert summary["resumed_from"] == 2 and summary["steps"] == 4
  assert [json.loads(line)["step"] for line in metrics.read_text().splitlines()] == [1, 2, 3, 4]
  assert (tmp_path / "seed7" / "metrics.jsonl.dropped").read_text() == '{"step": 3, "loss": 2.7\n'
  assert "metrics.jsonl:3: a partly written last line" in capsys.readouterr().out
