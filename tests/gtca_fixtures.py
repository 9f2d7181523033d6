"""Tiny files of GTCA's real sets in exactly their Hugging Face download layouts.

`write_gtca_fixtures(root)` writes, as `hf download … --local-dir root/<set>` would
(docs/DOWNSTREAM_DATA.md, "GTCA sets"):
- `cloth/`: `AndyChiang/cloth` main branch, `CLOTH_{train,valid,test}_cleaned.json` (one row per
  question: `sentence` with `[MASK]`, `answer`, `distractors`; train as JSON lines, the others as
  JSON arrays);
- `cloth_passages/`: the CLOTH passage layout (`article` with `_` blanks, `options` per blank,
  `answers` letters) as `data/{train,test}.jsonl`; the last test passage has no `answers` (its
  blanks are unlabeled);
- `cola/`: GLUE `nyu-mll/glue` `cola/{train,validation,test}-00000-of-00001.parquet`
  (`sentence`, `label`, `idx`; test labels −1);
- `mmlu/`, `hellaswag/`, `winogrande/` (and the other downstream tasks): the downstream fixtures
  (`tests.downstream_fixtures.write_fixtures`) plus MMLU's `all/auxiliary_train` split.
"""

from __future__ import annotations

import json
import pathlib

from tests.downstream_fixtures import HUB_SHARD, PEOPLE, THINGS, _cycle, _mmlu, _parquet, \
    write_fixtures

CLOTH_FILES = {"train": "train", "validation": "valid", "test": "test"}
VERBS = ("carried", "painted", "borrowed", "cleaned", "dropped", "found")


def cloth_question(i: int) -> dict:
  who, thing = _cycle(PEOPLE, i), _cycle(THINGS, i)
  return {"sentence": f"{who} [MASK] {thing} to the market on Monday .",
          "answer": _cycle(VERBS, i), "distractors": [_cycle(VERBS, i + k) for k in (1, 2, 3)]}


def cloth_passage(i: int, labeled: bool = True) -> dict:
  who, thing = _cycle(PEOPLE, i), _cycle(THINGS, i)
  row = {"article": f"{who} woke up early . She _ {thing} to the shop . The shop _ closed , so "
                    f"she went _ .",
         "options": [list(VERBS[:4]), ["was", "were", "is", "be"], ["home", "house", "away",
                                                                    "there"]],
         "source": "high" if i % 2 else "middle", "id": f"passage{i}"}
  if labeled:
    row["answers"] = ["A", "A", "A"]
  return row


def cola_row(i: int, labeled: bool = True) -> dict:
  who, thing = _cycle(PEOPLE, i), _cycle(THINGS, i)
  good = i % 2 == 0
  sentence = f"{who} carried {thing} home ." if good else f"{who} carried home {thing} the ."
  return {"sentence": sentence, "label": int(good) if labeled else -1, "idx": i}


def write_gtca_fixtures(root: str | pathlib.Path, rows: int = 4) -> dict[str, pathlib.Path]:
  """Every GTCA set's tiny download under `root/<set>`; returns set -> folder."""
  root = pathlib.Path(root)
  out = dict(write_fixtures(root, rows))
  _parquet(root / "mmlu" / f"all/auxiliary_train-{HUB_SHARD}.parquet",
           [dict(_mmlu(i, "miscellaneous"), subject="") for i in range(2 * rows)])
  cloth = root / "cloth"
  cloth.mkdir(parents=True, exist_ok=True)
  for split, name in CLOTH_FILES.items():
    n = 2 * rows if split == "train" else rows
    questions = [cloth_question(i) for i in range(n)]
    path = cloth / f"CLOTH_{name}_cleaned.json"
    if split == "train":
      path.write_text("".join(json.dumps(q) + "\n" for q in questions))
    else:
      path.write_text(json.dumps(questions))
  out["cloth"] = cloth
  passages = root / "cloth_passages" / "data"
  passages.mkdir(parents=True, exist_ok=True)
  (passages / "train.jsonl").write_text("".join(json.dumps(cloth_passage(i)) + "\n"
                                                for i in range(rows)))
  (passages / "test.jsonl").write_text("".join(json.dumps(cloth_passage(i, i < rows - 1)) + "\n"
                                               for i in range(rows)))
  out["cloth_passages"] = root / "cloth_passages"
  for split, n, labeled in (("train", 3 * rows, True), ("validation", 2 * rows, True),
                            ("test", rows, False)):
    _parquet(root / "cola" / f"cola/{split}-{HUB_SHARD}.parquet",
             [cola_row(i, labeled) for i in range(n)])
  out["cola"] = root / "cola"
  return out
