"""Downstream evaluation of the Pushdown reference (SPEC §14, issue #19): fine-tuning trains only
the summary / answer words and their attachments; a tiny run fine-tuned on fixture XSum and BoolQ
rows is evaluated by `python -m slm_jax.evaluate --tasks=xsum,boolq` (joint beam, teacher-forced
scoring with supplied spans) into results.json and tables.md."""

from __future__ import annotations

import dataclasses
import json

import jax
import numpy as np
import pytest

from tests.downstream_fixtures import write_fixtures
from tests.test_train import small_config
from slm_jax import evaluate
from slm_jax.finetune import __main__ as finetune_cli
from slm_jax.downstream.encoding import TextEncoder, make_tree_source
from slm_jax.downstream.example import TaskExample
from slm_jax.downstream.finetune_data import FinetuneBatches, encode_rows
from slm_jax.downstream.protocol import PushdownProtocol, protocol
from slm_jax.downstream.report import protocol_note
from slm_jax.kinds import Kind
from slm_jax.train import trainer
from slm_jax.configurations import CONFIGURATIONS
from slm_jax.tokenizer import make_tokenizer
from tests.test_pushdown_model import tiny_model

WORDS = ("The firm said it would buy the company . Shares rose bought is sold Monday on "
         "Question Answer : ? yes no Summarize article in one sentence")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("pushdown")
  trainer.train(small_config("pushdown", steps=2, **{"train.checkpoint_every": 2}), workdir)
  return workdir


def test_fine_tuning_trains_only_the_summary_and_the_answer():
  tokenizer = make_tokenizer("word", words=WORDS.split())
  configuration = CONFIGURATIONS["pushdown"]
  model = tiny_model(n_layers=1, vocab_size=tokenizer.vocab_size)
  assert isinstance(protocol(configuration), PushdownProtocol)
  encode = TextEncoder(tokenizer, configuration, make_tree_source("flat")).encode
  examples = [TaskExample("xsum", "The firm said it would buy the company . Shares rose .",
                          ("The firm bought it .",), 0, "xsum:0"),
              TaskExample("boolq", "is the firm sold", ("no", "yes"), 1, "boolq:0",
                          passage="The company bought the firm on Monday .")]
  rows, _ = encode_rows(examples, encode, max_len=256)
  batch = FinetuneBatches(rows, 2, 0, configuration, tokenizer.pad_id, 256).batch(0)
  loss = jax.jit(model.loss_sums)
  _, sums = loss(batch.as_dict())
  in_loss = batch.targets & np.isin(batch.meta.kind, (Kind.TERMINAL, Kind.EOS))
  words = batch.targets & (batch.meta.kind == Kind.TERMINAL)
  assert float(sums["count"]) == in_loss.sum() == 5 + 1 + 1  # 5 summary words + EOS, "yes"
  assert float(sums["attach_count"]) == words.sum() == 6
  everything = dict(batch.as_dict(), targets=batch.meta.segment != 0)  # as in pre-training
  assert float(loss(everything)[1]["count"]) > 20


def test_the_protocol_is_chosen_by_the_reference():
  pushdown = CONFIGURATIONS["pushdown"]
  assert protocol(CONFIGURATIONS["tree"]).name == "slm" and protocol(pushdown).name == "pushdown"
  assert protocol(pushdown).generated_positions(pushdown, max_tokens=150, max_words=75) == 150
  with pytest.raises(ValueError, match="no downstream protocol for reference model 'other'"):
    protocol(dataclasses.replace(pushdown, reference="other"))
  note = protocol_note({"models": [{"name": "P", "downstream": {"protocol": "pushdown"}},
                                   {"name": "T", "downstream": {"protocol": "slm"}},
                                   {"name": "S"}]})
  assert note.startswith("_P: the architectural reference (SPEC §14)") and "T:" not in note


def _finetune(run, data, out, task):
  assert finetune_cli.main([f"--task={task}", f"--workdir={run}", f"--out={out}",
                            f"--data_dir={data / task}", "--seeds=42", "--epochs=1",
                            "--batch_size=2", "--limit=2", "--warmup_steps=1", "--max_len=256",
                            "--tree_source=flat"]
                           + ["--xsum_train=full"] * (task == "xsum")) == 0  # short fixture rows
  return out


@pytest.mark.slow  # a tiny run, two fine-tunes, generation and scoring compiles (~60 s, 2 cores)
def test_xsum_and_boolq_through_the_evaluator(run, tmp_path):
  data = tmp_path / "data"
  write_fixtures(data, rows_per_split=2)
  xsum = _finetune(run, data, tmp_path / "xsum", "xsum")
  boolq = _finetune(run, data, tmp_path / "boolq", "boolq")
  out = tmp_path / "eval"
  assert evaluate.main([f"--workdir={run}", "--tasks=xsum,boolq", f"--downstream_dir={data}",
                        f"--out={out}", "--tree_source=flat", "--max_items=2", "--gen_beam=2",
                        "--gen_max_tokens=4", f"--xsum_finetuned={xsum}",
                        f"--boolq_finetuned={boolq}", "--bootstrap_resamples=20"]) == 0
  results = json.loads((out / "results.json").read_text())
  (model,) = results["models"]
  assert model["name"] == "Pushdown (architectural reference)" and "reference" in model
  downstream = model["downstream"]
  assert downstream["protocol"] == "pushdown" and downstream["tree_source"] == "flat"
  (seed,) = downstream["xsum"]["seeds"].values()
  assert seed["n"] == 2 and 0 <= seed["ravg"] <= 100
  predictions = [json.loads(line) for line in
                 (out / "downstream" / f"0_{run.name}" / "xsum" / "seed42.jsonl").read_text()
                 .splitlines()]
  assert len(predictions) == 2 and all(np.isfinite(p["logprob"]) for p in predictions)
  (accuracy,) = downstream["boolq_ft"]["seeds"].values()
  assert accuracy["n"] == 2 and 0 <= accuracy["accuracy"] <= 100
  assert accuracy["wrong_ties_nonfinite"] == 0
  tables = (out / "tables.md").read_text()
  assert "Pushdown (architectural reference): the architectural reference (SPEC §14)" in tables
  assert "joint beam over summary tokens and attachment actions" in tables
