"""Tiny files of the 12 downstream tasks in exactly their Hugging Face download layouts.

`write_fixtures(root)` writes `root/<task>/...` as `hf download ... --local-dir root/<task>`
would (docs/DOWNSTREAM_DATA.md), so `slm_jax.downstream.tasks.read_task(task, root)` reads them:
main-branch Parquet (`winogrande_xl/`, `all/`, `main/`, `ARC-Easy/`, `data/`), the
`refs/convert/parquet` branch (`default/validation/0000.parquet` for SocialIQA and XSum,
`plain_text/` for PIQA) and MMLU-Redux 2.0's `save_to_disk` Arrow folders, one per subject.
Every evaluation split has `rows_per_split` rows; every demonstration split at least as many as
the task's shots; unlabeled test splits are written the way the Hub has them ("" / −1).
Text is a few real-looking words per field, varied by row, so prompts and parses have content.
"""

from __future__ import annotations

import json
import pathlib

import pyarrow as pa
import pyarrow.parquet as pq

PEOPLE = ("Anna", "Brian", "Carla", "Dmitri", "Elena", "Farid", "Grace", "Hiro", "Ines")
THINGS = ("the kettle", "a bicycle", "the garden hose", "an umbrella", "the laptop",
          "a wool scarf", "the bookshelf", "a paper kite", "the frying pan")
SUBJECTS = ("astronomy", "philosophy")
HUB_SHARD = "00000-of-00001"


def _cycle(words, i: int) -> str:
  return words[i % len(words)]


def _parquet(path: pathlib.Path, rows: list[dict]) -> None:
  path.parent.mkdir(parents=True, exist_ok=True)
  pq.write_table(pa.Table.from_pylist(rows), path)


def _arrow_stream(path: pathlib.Path, rows: list[dict]) -> None:
  """A `datasets.save_to_disk` folder: the Arrow stream plus its two JSON files."""
  path.parent.mkdir(parents=True, exist_ok=True)
  table = pa.Table.from_pylist(rows)
  with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
    writer.write_table(table)
  (path.parent / "dataset_info.json").write_text(json.dumps({"features": table.schema.names}))
  (path.parent / "state.json").write_text(json.dumps({"_data_files": [{"filename": path.name}],
                                                      "_split": "test"}))


def _winogrande(i: int, labeled: bool) -> dict:
  a, b = _cycle(PEOPLE, i), _cycle(PEOPLE, i + 1)
  return {"sentence": f"{a} lent {b} the ladder because _ was painting the fence.",
          "option1": a, "option2": b, "answer": str(1 + i % 2) if labeled else ""}


def _hellaswag(i: int, labeled: bool) -> dict:
  who = _cycle(PEOPLE, i)
  if i % 2:  # a WikiHow row: bracketed markup and an empty ctx_b
    ctx_a = f"[header] How to fold {_cycle(THINGS, i)} [title] Lay it flat on a table."
    return {"ind": i, "activity_label": "Home and Garden", "ctx_a": ctx_a, "ctx_b": "",
            "ctx": ctx_a + " ", "endings": [f"[step] Fold it in half {k} times." for k in
                                            range(4)],
            "source_id": f"wikihow~{i}", "split": "val", "split_type": "indomain",
            "label": str(i % 4) if labeled else ""}
  ctx_a, ctx_b = f"{who} picks up {_cycle(THINGS, i)}.", "she"
  return {"ind": i, "activity_label": "Cleaning windows", "ctx_a": ctx_a, "ctx_b": ctx_b,
          "ctx": f"{ctx_a} {ctx_b}", "endings": [
              "wipes the glass with a cloth.", "throws it across the room.",
              "sings to the window.", "paints the ceiling green."],
          "source_id": f"activitynet~v_{i}", "split": "val", "split_type": "zeroshot",
          "label": str(i % 4) if labeled else ""}


def _boolq(i: int, labeled: bool) -> dict:
  del labeled
  thing = _cycle(THINGS, i)
  return {"question": f"is {thing} kept in the kitchen",
          "answer": bool(i % 2),
          "passage": f"In most homes {thing} is kept wherever there is room for it."}


def _mmlu(i: int, subject: str) -> dict:
  return {"question": f"Which statement about {subject} question {i} is true?",
          "subject": subject,
          "choices": [f"The first claim {i}", f"The second claim {i}", f"The third claim {i}",
                      f"The fourth claim {i}"],
          "answer": i % 4}


def _redux(i: int) -> dict:
  return {"question": f"Which planet is number {i + 1} from the sun?",
          "choices": ["Mercury", "Venus", "Earth", "Mars"], "answer": i % 4,
          "error_type": "ok" if i % 3 else "wrong_groundtruth", "source": f"source {i}",
          "correct_answer": None if i % 3 else "B", "potential_reason": ""}


def _lettered(i: int, n: int, numeric: bool) -> dict:
  labels = [str(k + 1) for k in range(n)] if numeric else list("ABCDE"[:n])
  return {"text": [f"{_cycle(THINGS, i + k)} in the shed" for k in range(n)], "label": labels}


def _openbookqa(i: int, labeled: bool) -> dict:
  del labeled
  choices = _lettered(i, 4, False)
  return {"id": f"{i}-obqa", "question_stem": f"Where would {_cycle(PEOPLE, i)} store tools?",
          "choices": choices, "answerKey": choices["label"][i % 4]}


def _commonsenseqa(i: int, labeled: bool) -> dict:
  choices = _lettered(i, 5, False)
  return {"id": f"csqa{i}", "question": f"Where might {_cycle(THINGS, i)} be found?",
          "question_concept": "storage", "choices": {"label": choices["label"],
                                                     "text": choices["text"]},
          "answerKey": choices["label"][i % 5] if labeled else ""}


def _socialiqa(i: int, labeled: bool) -> dict:
  del labeled
  who = _cycle(PEOPLE, i)
  return {"context": f"{who} baked bread for the neighbours.",
          "question": f"How would the neighbours feel about {who}?",
          "answerA": "grateful", "answerB": "annoyed", "answerC": "confused",
          "label": str(1 + i % 3)}


def _arc(i: int, labeled: bool, prefix: str) -> dict:
  del labeled
  n, numeric = (5, False) if i % 3 == 2 else (4, i % 3 == 1)
  choices = _lettered(i, n, numeric)
  return {"id": f"{prefix}_{i}", "question": f"Which tool best measures {_cycle(THINGS, i)}?",
          "choices": choices, "answerKey": choices["label"][i % n]}


def _piqa(i: int, labeled: bool) -> dict:
  thing = _cycle(THINGS, i)
  return {"goal": f"How do I clean {thing}?", "sol1": f"Rinse {thing} with warm water.",
          "sol2": f"Bury {thing} in the sand.", "label": i % 2 if labeled else -1}


def _xsum(i: int, labeled: bool) -> dict:
  del labeled
  who = _cycle(PEOPLE, i)
  return {"document": f"{who} opened a bakery in the town centre.\nQueues formed on day one.",
          "summary": f"A new bakery run by {who} has drawn crowds.", "id": str(30000000 + i)}


# task -> (file of a split, row maker, splits: (name, labeled, demonstration split))
_MAIN = "{config}/{split}-" + HUB_SHARD + ".parquet"
_DATA = "data/{split}-" + HUB_SHARD + ".parquet"
_CONVERTED = "{config}/{split}/0000.parquet"
LAYOUTS = {
    "winogrande": ("winogrande_xl", _MAIN, _winogrande, ("train", "validation", "test")),
    "hellaswag": ("default", _DATA, _hellaswag, ("train", "validation", "test")),
    "boolq": ("default", _DATA, _boolq, ("train", "validation")),
    "openbookqa": ("main", _MAIN, _openbookqa, ("train", "validation", "test")),
    "commonsenseqa": ("default", _DATA, _commonsenseqa, ("train", "validation", "test")),
    "socialiqa": ("default", _CONVERTED, _socialiqa, ("train", "validation")),
    "arc_easy": ("ARC-Easy", _MAIN, lambda i, labeled: _arc(i, labeled, "Mercury"),
                 ("train", "validation", "test")),
    "arc_challenge": ("ARC-Challenge", _MAIN, lambda i, labeled: _arc(i, labeled, "NYSED"),
                      ("train", "validation", "test")),
    "piqa": ("plain_text", _CONVERTED, _piqa, ("train", "validation", "test")),
    "xsum": ("default", _CONVERTED, _xsum, ("train", "validation", "test")),
}
UNLABELED_TESTS = ("winogrande", "hellaswag", "commonsenseqa", "piqa")


def write_fixtures(root: str | pathlib.Path, rows_per_split: int = 4) -> dict[str, pathlib.Path]:
  """Write every task's tiny download under `root/<task>`; returns task -> its folder."""
  root = pathlib.Path(root)
  out = {}
  demo_rows = max(rows_per_split, 5)
  for task, (config, pattern, make, splits) in LAYOUTS.items():
    for split in splits:
      n = demo_rows if split == "train" else rows_per_split
      labeled = not (split == "test" and task in UNLABELED_TESTS)
      path = root / task / pattern.format(config=config, split=split)
      _parquet(path, [make(i, labeled) for i in range(n)])
    out[task] = root / task
  # OpenBookQA's other config, which the reader must not pick up
  _parquet(root / "openbookqa" / f"additional/test-{HUB_SHARD}.parquet",
           [dict(_openbookqa(i, True), fact1="metal conducts heat", humanScore=1.0,
                 clarity=2.0, turkIdAnonymized="x") for i in range(rows_per_split)])
  # MMLU: `all/` (subjects in order) with test, validation (the shots) and dev
  for split, n in (("test", rows_per_split), ("validation", demo_rows + 1), ("dev", 5)):
    _parquet(root / "mmlu" / f"all/{split}-{HUB_SHARD}.parquet",
             [_mmlu(i, subject) for subject in SUBJECTS for i in range(n)])
  out["mmlu"] = root / "mmlu"
  # MMLU-Redux 2.0 main branch: one save_to_disk folder per subject, the test split only
  for subject in SUBJECTS:
    _arrow_stream(root / "mmlu_redux" / subject / "data-00000-of-00001.arrow",
                  [_redux(i) for i in range(rows_per_split)])
  out["mmlu_redux"] = root / "mmlu_redux"
  return out
