"""Evaluation sets read through TensorFlow Datasets, offline, from a prepared TFDS data_dir:
BLiMP as the `Paradigm`s the BLiMP evaluator scores, and the downstream tasks TFDS has as neutral
records (an alternative to the local Hugging Face layouts; no TensorFlow is imported).

BLiMP: TFDS `blimp`, one builder config per paradigm (`blimp/adjunct_island`), split `train`;
`blimp_pairs_from_tfds(tfds_dir, paradigms)` gives what `blimp.load_blimp` gives for the jsonl
files (pairs in `pair_id` order, the order of the files; paradigms sorted by UID).

Tasks (`TASKS`: our name → TFDS dataset, default split); `read_task(name, tfds_dir)` →
- multiple choice: `ChoiceItem(id, context, question, options, label)`: `id` the dataset's own
  (piqa, ARC) or the example's index in the split; `options` the answer texts, `label` the index
  of the right one (-1: unlabeled, e.g. a test split); `context` the text the question is about
  ("" when there is none), `question` the question ("" when none).
  boolq (passage; question; options no/yes), hellaswag (context; ""; the endings), piqa (""; the
  goal; the two solutions), winogrande (the sentence with its "_"; ""; the two fillers),
  arc_easy / arc_challenge (""; the question; the choices), openbookqa (""; the stem; A–D);
- summarization: `SummaryItem(id, document, summary)`: xsum.
SocialIQA and CommonsenseQA are not in the TFDS catalog (`NOT_IN_TFDS`): read them from their
local layouts. Build the TFDS data_dir on a machine with network (README: `tfds build …
--file_format=array_record`; building the catalog's datasets runs their code, which needs
TensorFlow); BLiMP also builds offline from the shared jsonl (`--manual_dir`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Sequence

from slm_jax.data.tfds_corpus import TfdsError, built_configs, open_split
from slm_jax.eval.blimp import Paradigm

BLIMP = "blimp"
BLIMP_FEATURES = ("sentence_good", "sentence_bad", "UID", "field", "linguistics_term", "pair_id")
_HOW = ("build it on a machine with network: pip install tensorflow-datasets tensorflow-cpu; "
        "tfds build {name} --data_dir=DIR --file_format=array_record (README)")


@dataclasses.dataclass(frozen=True)
class ChoiceItem:
  """One multiple-choice item (see the module docstring)."""

  id: str
  context: str
  question: str
  options: tuple[str, ...]
  label: int  # index into options; -1 = unlabeled


@dataclasses.dataclass(frozen=True)
class SummaryItem:
  id: str
  document: str
  summary: str


def text(value: Any) -> str:
  """A TFDS text value (bytes from files, str from mock data) as str."""
  return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _texts(values: Any) -> tuple[str, ...]:
  return tuple(text(v) for v in values)


def _choice(item_id: str, context: Any, question: Any, options: Sequence[Any],
            label: Any) -> ChoiceItem:
  options, label = _texts(options), int(label)
  if not -1 <= label < len(options):
    raise ValueError(f"item {item_id}: label {label} outside its {len(options)} options")
  return ChoiceItem(item_id, text(context), text(question), options, label)


def _boolq(x, i):
  return _choice(str(i), x["passage"], x["question"], ("no", "yes"), bool(x["answer"]))


def _hellaswag(x, i):
  return _choice(str(i), x["context"], "", x["endings"], x["label"])


def _piqa(x, i):
  return _choice(text(x["id"]), "", x["goal"], (x["sol1"], x["sol2"]), x["label"])


def _winogrande(x, i):
  return _choice(str(i), x["sentence"], "", (x["option1"], x["option2"]), x["label"])


def _arc(x, i):
  keys = [int(k) for k in x["choices"]["label"]]
  key = int(x["answerKey"])
  if key not in keys:
    raise ValueError(f"ARC item {text(x['id'])}: answer key {key} is not among its choices {keys}")
  return _choice(text(x["id"]), "", x["question"], x["choices"]["text"], keys.index(key))


def _openbookqa(x, i):
  q = x["question"]
  options = [q[f"choice_{c}"] for c in "ABCD"]
  return _choice(str(i), "", q["stem"], options, x["answerKey"])


def _xsum(x, i):
  return SummaryItem(str(i), text(x["document"]), text(x["summary"]))


@dataclasses.dataclass(frozen=True)
class Task:
  tfds_name: str
  split: str  # the split evaluated by default
  features: tuple[str, ...]  # the feature paths the reader uses
  read: Callable[[dict, int], ChoiceItem | SummaryItem]


TASKS = {
    "boolq": Task("bool_q", "validation", ("passage", "question", "answer"), _boolq),
    "hellaswag": Task("hellaswag", "validation", ("context", "endings", "label"), _hellaswag),
    "piqa": Task("piqa", "validation", ("id", "goal", "sol1", "sol2", "label"), _piqa),
    "winogrande": Task("winogrande", "validation", ("sentence", "option1", "option2", "label"),
                       _winogrande),
    "arc_easy": Task("ai2_arc/ARC-Easy", "test",
                     ("id", "question", "choices/text", "choices/label", "answerKey"), _arc),
    "arc_challenge": Task("ai2_arc/ARC-Challenge", "test",
                          ("id", "question", "choices/text", "choices/label", "answerKey"), _arc),
    "openbookqa": Task("openbookqa", "test",
                       ("question/stem", *(f"question/choice_{c}" for c in "ABCD"), "answerKey"),
                       _openbookqa),
    "xsum": Task("xsum", "test", ("document", "summary"), _xsum),
}
NOT_IN_TFDS = {"siqa": "SocialIQA", "commonsense_qa": "CommonsenseQA"}


def read_task(name: str, tfds_dir: str | os.PathLike | None, split: str | None = None,
              limit: int | None = None, version: str | None = None
              ) -> list[ChoiceItem] | list[SummaryItem]:
  """The items of task `name` (a `TASKS` key) from its TFDS build under `tfds_dir` (default split
  of the task unless `split`; the first `limit`; the newest built version unless `version`)."""
  if name in NOT_IN_TFDS:
    raise TfdsError(f"{NOT_IN_TFDS[name]} ({name}) is not in the TFDS catalog: read it from its "
                    "local Hugging Face layout")
  if name not in TASKS:
    raise TfdsError(f"unknown task {name!r}; TFDS tasks: {', '.join(TASKS)}")
  task = TASKS[name]
  tfds_name = task.tfds_name + (f":{version}" if version else "")
  _, source = open_split(tfds_name, tfds_dir, split or task.split, task.features,
                         _HOW.format(name=task.tfds_name), f"the {name} reader")
  count = len(source) if limit is None else min(limit, len(source))
  return [task.read(source[i], i) for i in range(count)]


def blimp_pairs_from_tfds(tfds_dir: str | os.PathLike | None,
                          paradigms: Sequence[str] | None = None,
                          max_items: int | None = None) -> list[Paradigm]:
  """BLiMP `Paradigm`s from TFDS `blimp/<UID>` (all built ones when `paradigms` is None), as
  `blimp.load_blimp` reads them from the jsonl files: pairs in pair_id order (the first
  `max_items` of each), paradigms sorted by UID."""
  names = (built_configs(BLIMP, tfds_dir, _HOW.format(name=BLIMP)) if paradigms is None
           else list(paradigms))
  if not names:
    raise TfdsError(f"no BLiMP paradigms built under {tfds_dir}; "
                    + _HOW.format(name=BLIMP))
  out = []
  for uid in names:
    _, source = open_split(f"{BLIMP}/{uid}", tfds_dir, "train", BLIMP_FEATURES,
                           _HOW.format(name=f"{BLIMP} --config={uid}"), "the BLiMP reader")
    rows = sorted((source[i] for i in range(len(source))), key=lambda r: int(r["pair_id"]))
    rows = rows[:max_items] if max_items is not None else rows
    if not rows:
      raise TfdsError(f"BLiMP paradigm {uid} under {tfds_dir} holds no pairs")
    meta = [(text(r["UID"]), text(r["field"]), text(r["linguistics_term"])) for r in rows]
    if len(set(meta)) != 1 or meta[0][0] != uid:
      raise TfdsError(f"BLiMP paradigm {uid} under {tfds_dir}: its pairs carry UID/field/term "
                      f"{sorted(set(meta))[:2]}, not one set for {uid}")
    out.append(Paradigm(uid, meta[0][1], meta[0][2], [text(r["sentence_good"]) for r in rows],
                        [text(r["sentence_bad"]) for r in rows]))
  return sorted(out, key=lambda p: p.uid)
