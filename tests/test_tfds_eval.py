"""Evaluation sets read through TFDS: BLiMP pairs equal the jsonl reader's, each task's neutral
records from builds with the TFDS catalog's own features, and bad input named."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import pathlib

import pytest

tfds = pytest.importorskip("tensorflow_datasets", reason="the tfds extra is not installed")

from slm_jax.data.tfds_corpus import TfdsError  # noqa: E402
from slm_jax.eval.blimp import load_blimp  # noqa: E402
from slm_jax.eval.tfds_sets import (  # noqa: E402
    TASKS, ChoiceItem, SummaryItem, blimp_pairs_from_tfds, read_task)
from tests.shared_data import require_shared  # noqa: E402

tfds.disable_progress_bar()
PARADIGMS = ("adjunct_island", "anaphor_gender_agreement")


def build_like(tfds_name: str, root: pathlib.Path, examples: dict[str, list[tuple]],
               features=None, version: str = "1.0.0") -> None:
  """A tiny build of `tfds_name` under `root`, `examples` = split → [(key, example)] (TFDS
  shuffles them by key): the TFDS catalog builder's features and version, or `features`."""
  dataset, _, config = tfds_name.partition("/")
  if features is None:
    for module in ("text.hellaswag", "text.winogrande", "summarization.xsum"):
      importlib.import_module(f"tensorflow_datasets.{module}")  # catalog modules not yet indexed
    catalog = tfds.builder(tfds_name, data_dir=os.fspath(root / "catalog"))  # code only
    features, version = catalog.info.features, str(catalog.info.version)

  class Tiny(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    name = dataset
    VERSION = tfds.core.Version(version)
    BUILDER_CONFIGS = [tfds.core.BuilderConfig(name=config)] if config else []

    def _info(self):
      return tfds.core.DatasetInfo(builder=self, features=features)

    def _split_generators(self, dl_manager):
      return {split: self._generate_examples(rows) for split, rows in examples.items()}

    def _generate_examples(self, rows):
      yield from rows

  Tiny(config=config or None, data_dir=os.fspath(root),
       file_format="array_record").download_and_prepare()


@pytest.fixture(scope="module")
def blimp(tmp_path_factory):
  """The first 12 pairs of two paradigms: as jsonl files and as a TFDS blimp build."""
  tmp = tmp_path_factory.mktemp("blimp")
  (tmp / "jsonl").mkdir()
  for uid in PARADIGMS:
    lines = (require_shared("blimp") / f"{uid}.jsonl").read_text().splitlines()[:12]
    (tmp / "jsonl" / f"{uid}.jsonl").write_text("\n".join(lines) + "\n")
    rows = []
    for line in lines:
      r = json.loads(line)
      rows.append((f"{r['UID']}_{r['pairID']}", {
          "sentence_good": r["sentence_good"], "sentence_bad": r["sentence_bad"],
          "field": r["field"], "linguistics_term": r["linguistics_term"], "UID": r["UID"],
          "simple_LM_method": r["simple_LM_method"], "one_prefix_method": r["one_prefix_method"],
          "two_prefix_method": r["two_prefix_method"],
          "lexically_identical": r["lexically_identical"], "pair_id": int(r["pairID"])}))
    build_like(f"blimp/{uid}", tmp / "tfds", {"train": rows})
  return tmp


def test_blimp_pairs_from_tfds_equal_the_jsonl_reader(blimp):
  want = load_blimp(blimp / "jsonl")
  assert blimp_pairs_from_tfds(blimp / "tfds", PARADIGMS) == want
  assert blimp_pairs_from_tfds(blimp / "tfds") == want  # every built paradigm
  few = blimp_pairs_from_tfds(blimp / "tfds", ["adjunct_island"], max_items=3)
  assert few == load_blimp(blimp / "jsonl", max_items=3)[:1]
  assert len(want) == 2 and [len(p) for p in want] == [12, 12]


def test_missing_blimp_is_named_with_the_build_command(blimp, tmp_path):
  with pytest.raises(TfdsError, match=f"TFDS data_dir {tmp_path}/none does not exist; build it "
                                      "on a machine with network.*tfds build blimp"):
    blimp_pairs_from_tfds(tmp_path / "none", PARADIGMS)
  with pytest.raises(TfdsError, match="has no TFDS dataset 'wh_island' \\(of blimp/wh_island; "
                                      "it holds adjunct_island, anaphor_gender_agreement\\)"):
    blimp_pairs_from_tfds(blimp / "tfds", ["wh_island"])


LONG = "The trophy does not fit into the brown suitcase because the _ is too large."
TASK_EXAMPLES = {  # task → (split, its examples in the catalog's features, the records we want)
    "boolq": ("validation", [{"question": "is the sky blue", "passage": "The sky is blue.",
                              "answer": True, "title": "Sky"}],
              [ChoiceItem("0", "The sky is blue.", "is the sky blue", ("no", "yes"), 1)]),
    "hellaswag": ("validation", [{"context": "A man lifts a bar.", "endings": [
        "He drops it.", "He sings.", "He flies.", "He naps."], "activity_label": "Lifting",
        "label": 0, "split_type": "indomain", "source_id": "activitynet~v_1"}],
        [ChoiceItem("0", "A man lifts a bar.", "", ("He drops it.", "He sings.", "He flies.",
                                                     "He naps."), 0)]),
    "piqa": ("validation", [{"id": "p7", "goal": "Open a jar.", "sol1": "Twist the lid.",
                             "sol2": "Paint the lid.", "label": 0}],
             [ChoiceItem("p7", "", "Open a jar.", ("Twist the lid.", "Paint the lid."), 0)]),
    "winogrande": ("validation", [{"sentence": LONG, "option1": "trophy", "option2": "suitcase",
                                   "label": 0},
                                  {"sentence": LONG, "option1": "trophy", "option2": "suitcase",
                                   "label": -1}],
                   [ChoiceItem("0", LONG, "", ("trophy", "suitcase"), 0),
                    ChoiceItem("1", LONG, "", ("trophy", "suitcase"), -1)]),
    "arc_easy": ("test", [{"id": "Mercury_1", "question": "Which is a gas?", "choices": {
        "text": ["iron", "wood", "steam", "ice"], "label": ["A", "B", "C", "D"]},
        "answerKey": "C"}],
        [ChoiceItem("Mercury_1", "", "Which is a gas?", ("iron", "wood", "steam", "ice"), 2)]),
    "openbookqa": ("test", [{"question": {"stem": "The sun is a", "choice_A": "planet",
                                          "choice_B": "moon", "choice_C": "comet",
                                          "choice_D": "star"},
                             "fact1": "the sun is a star", "humanScore": 1.0, "clarity": 2.0,
                             "turkIdAnonymized": "b356d338b7", "answerKey": "D"}],
                   [ChoiceItem("0", "", "The sun is a", ("planet", "moon", "comet", "star"), 3)]),
    "xsum": ("test", [{"document": "Rain fell all day in Leeds.", "summary": "Leeds was wet."}],
             [SummaryItem("0", "Rain fell all day in Leeds.", "Leeds was wet.")]),
}


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
  root = tmp_path_factory.mktemp("tasks")
  for name, (split, examples, _) in TASK_EXAMPLES.items():
    build_like(TASKS[name].tfds_name, root, {split: list(enumerate(examples))})
  return root


@pytest.mark.parametrize("name", sorted(TASK_EXAMPLES))
def test_each_task_reads_as_neutral_records(tasks, name):
  split, _, want = TASK_EXAMPLES[name]
  assert TASKS[name].split == split
  assert read_task(name, tasks) == want
  assert read_task(name, tasks, limit=1) == want[:1]


def test_bad_task_input_is_named(tasks, tmp_path):
  with pytest.raises(TfdsError, match="SocialIQA \\(siqa\\) is not in the TFDS catalog"):
    read_task("siqa", tasks)
  with pytest.raises(TfdsError, match="unknown task 'mmlu'"):
    read_task("mmlu", tasks)
  with pytest.raises(TfdsError, match="ARC-Challenge' \\(of ai2_arc/ARC-Challenge; it holds "
                                      "ARC-Easy\\).*tfds build ai2_arc/ARC-Challenge"):
    read_task("arc_challenge", tasks)
  with pytest.raises(TfdsError, match="bool_q version 9.9.9 is not in"):
    read_task("boolq", tasks, version="9.9.9")
  with pytest.raises(TfdsError, match="has splits validation, not 'train'"):
    read_task("boolq", tasks, split="train")
  other = tfds.features.FeaturesDict({"question": tfds.features.Text(),
                                      "answer": tfds.features.Text()})
  build_like("bool_q", tmp_path, {"validation": [(0, {"question": "q", "answer": "a"})]}, other,
             version=str(tfds.builder_from_directory(os.fspath(tasks / "bool_q" / "1.0.0"))
                         .info.version))
  with pytest.raises(TfdsError, match="its features \\(answer, question\\) lack passage, which "
                                      "the boolq reader reads"):
    read_task("boolq", tmp_path)


@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None,
                    reason="building the TFDS catalog's blimp runs its code, which reads files "
                    "with tf.io.gfile: needs TensorFlow (pip install tensorflow-cpu)")
def test_the_catalogs_blimp_built_offline_from_the_shared_jsonl(tmp_path):
  shared = require_shared("blimp")
  builder = tfds.builder(f"blimp/{PARADIGMS[0]}", data_dir=os.fspath(tmp_path),
                         file_format="array_record")
  builder.download_and_prepare(download_config=tfds.download.DownloadConfig(
      manual_dir=os.fspath(shared)))  # the shared files match the catalog's checksums
  (tmp_path / "jsonl").mkdir()
  (tmp_path / "jsonl" / f"{PARADIGMS[0]}.jsonl").write_bytes(
      (shared / f"{PARADIGMS[0]}.jsonl").read_bytes())
  assert blimp_pairs_from_tfds(tmp_path, PARADIGMS[:1]) == load_blimp(tmp_path / "jsonl")


def test_the_evaluator_reads_blimp_from_tfds_as_from_jsonl(blimp, tmp_path):
  from slm_jax import evaluate
  from slm_jax.train import trainer
  from tests.test_train import small_config
  run = tmp_path / "run"
  trainer.train(small_config("terminal", steps=2), run)
  results = {}
  for source, flags in (("local", [f"--blimp_dir={blimp / 'jsonl'}"]),
                        ("tfds", ["--data_source=tfds", f"--tfds_dir={blimp / 'tfds'}"])):
    out = tmp_path / source
    assert evaluate.main([f"--workdir={run}", "--tasks=blimp", f"--out={out}",
                          "--max_items=5", *flags]) == 0
    results[source] = json.loads((out / "results.json").read_text())
  local, via_tfds = (results[s]["models"][0]["blimp"] for s in ("local", "tfds"))
  assert via_tfds["pairs"] == local["pairs"] == 10
  assert via_tfds["overall"] == local["overall"] and via_tfds["paradigms"] == local["paradigms"]
  assert results["tfds"]["settings"]["blimp_source"].startswith("tfds ")
