"""BLiMP as GTCA's multiple-choice task (`slm_jax.gtca.blimp_mcqa`): the paradigm and pair
splits, the balanced option order, the round-robin order, the sets in `mcqa_data.SETS`, the
parse-cache records, `load_real`'s end-of-run sets and a run that scores them, on a fixture in
BLiMP's release layout."""

from __future__ import annotations

import collections
import json

import numpy as np
import pytest

from slm_jax import cli
from slm_jax.data.rows import RowDataError
from slm_jax.gtca import blimp_mcqa, cache_records, evaluate, mcqa_data, real_sets, train
from slm_jax.gtca import cache as gcache
from tests.gtca_fixtures import tiny_workdir

pytest.importorskip("tokenizers")

WHO = ("Anna", "Brian", "Carla", "Dmitri")
UIDS = [f"paradigm_{k}" for k in range(8)]  # sorted order = k; held out: k = 3, 7
FIELDS = ("morphology", "syntax")
N_PAIRS = 10  # test pairs of a seen paradigm: i = 4, 9


def _pair(k: int, i: int) -> dict:
  who = WHO[i % len(WHO)]
  good, bad = (f"{who} was early .", f"{who} were early .") if k % 2 else (
      f"{who} went home .", f"{who} home went .")
  return {"sentence_good": good, "sentence_bad": bad, "field": FIELDS[k % 2],
          "linguistics_term": f"term_{k % 3}", "UID": UIDS[k], "pairID": str(i)}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
  """BLiMP's layout under `root/blimp`: 8 paradigms × 10 pairs, files in reversed order of
  creation (the split follows the sorted UIDs, not the file system)."""
  folder = tmp_path_factory.mktemp("data") / "blimp"
  folder.mkdir()
  for k in reversed(range(len(UIDS))):
    (folder / f"{UIDS[k]}.jsonl").write_text(
        "".join(json.dumps(_pair(k, i)) + "\n" for i in range(N_PAIRS)))
  return folder.parent


def _where(source: str) -> tuple[int, int]:
  uid, pair = source.rsplit(":", 1)
  return UIDS.index(uid), int(pair)


def test_paradigms_and_pairs_are_split_as_documented(root):
  train_split = mcqa_data.load_set("blimp_mcqa", root, "train")
  test_split = mcqa_data.load_set("blimp_mcqa", root, "test")
  held = mcqa_data.load_set("blimp_mcqa", root, "heldout")
  seen = {_where(x.source) for x in train_split.examples}
  tested = {_where(x.source) for x in test_split.examples}
  other = {_where(x.source) for x in held.examples}
  assert {k for k, _ in seen} == {k for k, _ in tested} == {0, 1, 2, 4, 5, 6}
  assert {k for k, _ in other} == {3, 7}
  assert {i for _, i in tested} == {4, 9} and not {i for _, i in seen} & {4, 9}
  assert len(seen) == 6 * 8 and len(tested) == 6 * 2 and len(other) == 2 * 10  # all, once
  assert not seen & tested and not (seen | tested) & other
  assert train_split.counts["paradigms"] == 6 and held.counts["paradigms"] == 2
  assert mcqa_data.load_set("blimp_mcqa_heldout", root).split == "heldout"
  with pytest.raises(RowDataError, match="splits train, test, heldout, not 'validation'"):
    mcqa_data.load_set("blimp_mcqa", root, "validation")


def test_options_are_balanced_deterministic_and_right(root):
  for split in blimp_mcqa.SPLITS:
    examples = mcqa_data.load_set("blimp_mcqa", root, split).examples
    again = mcqa_data.load_set("blimp_mcqa", root, split).examples
    assert examples == again
    assert 2 * sum(x.answer == 0 for x in examples) == len(examples)
    by_paradigm = collections.defaultdict(set)
    for x in examples:
      k, i = _where(x.source)
      good = _pair(k, i)["sentence_good"]
      assert x.question == blimp_mcqa.QUESTION and x.options[x.answer] == good
      assert x.options[1 - x.answer] == _pair(k, i)["sentence_bad"]
      assert x.group == FIELDS[k % 2]
      by_paradigm[k].add(x.answer)
    assert all(answers == {0, 1} for answers in by_paradigm.values())  # both letters per paradigm


def test_a_limit_takes_whole_rounds_over_the_paradigms(root):
  first = mcqa_data.load_set("blimp_mcqa", root, "train", limit=7).examples
  assert [_where(x.source) for x in first] == [(0, 0), (1, 0), (2, 0), (4, 0), (5, 0), (6, 0),
                                               (0, 1)]
  assert [x.answer for x in first[:6]] == [0, 1, 0, 1, 0, 1]
  assert first[6].answer == 1  # round 1 starts with the other letter


def test_heldout_pairs_are_minimal_pairs_of_the_heldout_paradigms(root):
  pairs = mcqa_data.load_set("blimp_heldout", root, limit=3)
  assert [p.uid for p in pairs.paradigms] == ["paradigm_3", "paradigm_7"]
  assert pairs.counts["pairs"] == 6 and pairs.summary() == (
      "blimp_heldout all: 6 pairs of 2 paradigms in 8 files")
  assert pairs.examples[0].sentences()[0].source == "paradigm_3:0:good"
  with pytest.raises(RowDataError, match="blimp_heldout has one split, 'all', not 'train'"):
    mcqa_data.load_set("blimp_heldout", root, "train")


def test_cache_records_of_every_split(root):
  records, counts = cache_records.task_records("blimp_mcqa", root, "test", None)
  assert counts["examples"] == 12 and counts["split"] == "test"
  assert records[0][1]["question"] == blimp_mcqa.QUESTION and len(records[0][1]["options"]) == 2
  records, counts = cache_records.task_records("blimp_heldout", root, None, 2)
  assert [r[0] for r in records[:2]] == ["paradigm_3:0:good", "paradigm_3:0:bad"]
  assert cache_records.task_summary("blimp_heldout", counts) == (
      "blimp_heldout all: 2 paradigms, 4 pairs, 8 sentences (good and bad of every pair)")


def test_load_real_reads_the_end_of_run_sets(root):
  real = real_sets.load_real("blimp_mcqa", root, 10, 4, 5)
  assert [len(real.splits[s]) for s in ("train", "dev", "test")] == [10, 4, 5]
  assert set(real.also) == {"blimp_mcqa_heldout", "blimp_heldout"}
  assert len(real.also["blimp_mcqa_heldout"].examples) == 5
  assert real.also["blimp_heldout"].counts["pairs"] == 6  # ⌈5 / 2⌉ = 3 pairs per paradigm
  assert "blimp_heldout all: 6 pairs of 2 paradigms in 8 files (evaluated at the end)" in (
      real.summary())


@pytest.mark.slow  # a backbone run: one decoder built, two scorers compiled
def test_a_run_scores_the_heldout_sets_at_its_end(root, tmp_path, monkeypatch, capsys):
  words = ({w for k in range(8) for i in range(4) for s in ("sentence_good", "sentence_bad")
            for w in _pair(k, i)[s].split()} | {"Which", "sentence", "is", "grammatical?"})
  workdir = tiny_workdir(tmp_path, words, monkeypatch)
  cache = tmp_path / "c.sqlite"
  for extra in (["--task=blimp_mcqa", "--split=train"], ["--task=blimp_mcqa"],
                ["--task=blimp_mcqa_heldout"], ["--task=blimp_heldout"]):
    assert cli.run(gcache.main, [*extra, f"--data_root={root}", f"--workdir={workdir}",
                                 "--parser=right_branching", f"--out={cache}"]) == 0
  out = tmp_path / "run"
  assert train.main([f"--backbone={workdir}", f"--out={out}", f"--data_root={root}",
                     f"--cache={cache}", "--task=blimp_mcqa", "--methods=backbone",
                     "--train_items=8", "--dev_items=4", "--test_items=4"]) == 0
  result = json.loads((out / "result.json").read_text())
  found = result["metrics"]
  assert {"blimp_mcqa", "blimp_mcqa_heldout", "blimp_heldout", "blimp_heldout_syntax"} <= set(
      found)
  assert result["counts"]["blimp_heldout"]["pairs"] == 4  # ⌈4 / 2⌉ per held-out paradigm
  # the held-out MCQA accuracy is what scoring the run on that set afterwards gives
  capsys.readouterr()
  assert evaluate.main([f"--run={out}", "--task=blimp_mcqa_heldout", f"--data_root={root}",
                        f"--cache={cache}", "--limit=4", "--force"]) == 0
  again = json.loads((out / "eval_blimp_mcqa_heldout.json").read_text())["metrics"]
  assert again["blimp_mcqa_heldout"] == pytest.approx(found["blimp_mcqa_heldout"])
  assert np.isfinite(found["blimp_heldout"])
  assert evaluate.main([f"--runs={out}"]) == 0
  assert "BLiMP-MC held-out paradigms↑" in capsys.readouterr().out
