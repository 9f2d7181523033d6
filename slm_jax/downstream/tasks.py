"""The downstream task data (SPEC §11): where each task's files come from, how its rows read.

`TASK_SOURCES` is the registry: per task the Hub dataset, its config (the folder the download
lays it in), the evaluation split and its SPEC §11 size, the demonstration split and the shot
count (`SHOTS`). Files are read locally from a folder holding one task's
`hf download <repo> --repo-type dataset --local-dir <root>` (docs/DOWNSTREAM_DATA.md has the
commands); `find_split` locates a split there in any of the layouts the Hub serves:

  <config>/<split>-00000-of-00001.parquet   main branch (ARC-Easy/, winogrande_xl/, all/, main/)
  data/<split>-00000-of-00001.parquet       main branch without configs (boolq, commonsense_qa)
  <config>/<split>/0000.parquet             `--revision refs/convert/parquet` (script datasets:
                                            piqa, social_i_qa, xsum; hellaswag before its
                                            conversion); default/<name>-<split>.parquet, the
                                            converter's older naming, is found too
  data/<split>.jsonl, <split>.jsonl         JSON lines in the same field layout
  <subject>/data-00000-of-00001.arrow       MMLU-Redux 2.0 main branch (`save_to_disk`, test only)

Row layouts (Hub field names → `TaskExample`, see `slm_jax.downstream.example`):
- WinoGrande `sentence` (blank `_`), `option1`, `option2`, `answer` "1"/"2" ("" unlabeled).
- HellaSwag `ctx_a` + " " + `ctx_b`.capitalize() (or `ctx`), `endings`, `label`,
  `activity_label` → group. Cleaned as lm-eval-harness / OLMES do (`clean_hellaswag`): strip,
  " [title]" → ". ", every bracketed WikiHow tag ("[header]", "[step]", "[substeps]") removed,
  "  " → " " once, strip again; the prompt builder writes `f"{group}: {question}"`.
- BoolQ `question`, `passage`, `answer` (bool; super_glue's `label` 0/1 accepted) → options
  ("yes", "no"), answer 0 for True: the paper code's order (`BoolQ.doc_to_continuations`, whose
  argmax gives a tie to " yes") and OLMES's (its requests' `choices`).
- MMLU `question`, `choices`, `answer` (int, or letter), `subject` → group.
- MMLU-Redux 2.0 `question`, `choices`, `answer` (the original MMLU label, kept for every row:
  the 5,700 of SPEC §11 are all 57 × 100), subject from its folder (rows carry none). Its
  `error_type` (ok, wrong_groundtruth, ...) is not part of the example; `load_split` counts
  each type (`error_type=<type>`) so a report can say how many labels were flagged.
- OpenBookQA `question_stem`, `choices` {text, label}, `answerKey`.
- CommonsenseQA `question`, `choices` {label, text}, `answerKey` ("" in test).
- SocialIQA `context` → passage, `question`, `answerA/B/C`, `label` "1".."3".
- ARC `question`, `choices` {text, label}, `answerKey`; labels "A".."E" or "1".."5" (the key is
  looked up in the row's own labels).
- PIQA `goal`, `sol1`, `sol2`, `label` 0/1 (−1 in test).
- XSum `document` → question, `summary` → options = (summary,), answer 0 (`id` unread); a row
  whose document is the empty string is skipped and counted (`counts["empty_document"]`), as
  the paper code does (test split: 11,333 of 11,334 rows scored).
Only HellaSwag's text is changed; every other field is kept as the Hub has it.

A missing field, a wrong type or an answer outside the options is a `RowDataError` naming file,
row and field. Nothing is dropped: an unlabeled row is an example with answer −1 and is counted
(`TaskSplit.counts["unlabeled"]`); demonstrations are the first `SHOTS` labeled rows, in file
order, of the demonstration split — fixed, no sampling.
"""

from __future__ import annotations

import collections
import dataclasses
import pathlib
import re
from typing import Callable

import numpy as np

from slm_jax.data.rows import RowDataError, RowReader, read_rows
from slm_jax.downstream import olmo_data
from slm_jax.downstream.example import TASKS, TaskExample


@dataclasses.dataclass(frozen=True)
class TaskSource:
  """Where one task's data comes from and which splits the evaluation uses."""
  repo: str  # Hub dataset id
  configs: tuple[str, ...]  # config folders, first preferred; () = none (per-subject folders)
  eval_split: str
  eval_size: int  # rows of the evaluation split (SPEC §11; XSum: the Hub card's test size)
  demo_split: str  # demonstrations (XSum, BoolQ fine-tuning: the training split)
  shots: int
  revision: str = "main"  # the branch docs/DOWNSTREAM_DATA.md downloads


TASK_SOURCES: dict[str, TaskSource] = {
    "winogrande": TaskSource("allenai/winogrande", ("winogrande_xl",), "validation", 1267,
                             "train", 5),
    "hellaswag": TaskSource("Rowan/hellaswag", ("default",), "validation", 10042, "train", 5),
    "boolq": TaskSource("google/boolq", ("default", "boolq"), "validation", 3270, "train", 3),
    "mmlu": TaskSource("cais/mmlu", ("all",), "test", 14042, "validation", 5),
    "mmlu_redux": TaskSource("edinburgh-dawg/mmlu-redux-2.0", (), "test", 5700, "validation", 5),
    "openbookqa": TaskSource("allenai/openbookqa", ("main",), "test", 500, "train", 5),
    "commonsenseqa": TaskSource("tau/commonsense_qa", ("default",), "validation", 1221,
                                "train", 3),
    "socialiqa": TaskSource("allenai/social_i_qa", ("default",), "validation", 1954, "train", 3,
                            "refs/convert/parquet"),
    "arc_easy": TaskSource("allenai/ai2_arc", ("ARC-Easy",), "validation", 570, "train", 3),
    "arc_challenge": TaskSource("allenai/ai2_arc", ("ARC-Challenge",), "validation", 299,
                                "train", 3),
    "piqa": TaskSource("ybisk/piqa", ("plain_text",), "validation", 1838, "train", 3,
                       "refs/convert/parquet"),
    "xsum": TaskSource("EdinburghNLP/xsum", ("default",), "test", 11334, "train", 0,
                       "refs/convert/parquet"),
}
SHOTS = {task: source.shots for task, source in TASK_SOURCES.items() if source.shots}
SUBJECT_TASKS = ("mmlu", "mmlu_redux")  # demonstrations per subject; macro average over them


def source_of(task: str) -> TaskSource:
  if task not in TASK_SOURCES:
    raise RowDataError(f"unknown task {task!r}; expected one of {', '.join(TASKS)}")
  return TASK_SOURCES[task]


# ---- locating a split ------------------------------------------------------------------------
def split_patterns(source: TaskSource, split: str) -> list[str]:
  """The glob patterns, in the order tried, of one split of a Hub download (module docstring);
  also used for datasets outside `TASK_SOURCES` (GTCA's CLOTH and CoLA,
  `slm_jax.gtca.mcqa_data`)."""
  if not source.configs:  # MMLU-Redux: one folder per subject
    return [f"*/{split}-*.parquet", f"*/{split}/*.parquet", "*/data-*.arrow", f"*/{split}.jsonl"]
  out = []
  for config in source.configs:
    out += [f"{config}/{split}-*.parquet", f"{config}/{split}/*.parquet",
            f"{config}/*-{split}.parquet"]
  return out + [f"data/{split}-*.parquet", f"{split}-*.parquet", f"data/{split}.jsonl",
                f"{split}.jsonl", f"data/{split}.json", f"{split}.json"]


def task_folder(root: str | pathlib.Path, task: str) -> pathlib.Path:
  """`root/<task>` when `root` holds one folder per task, else `root` (a task's download)."""
  root = pathlib.Path(root)
  return root / task if (root / task).is_dir() else root


def match_split(base: pathlib.Path, patterns: list[str], what: str) -> list[pathlib.Path]:
  """The files of the first pattern that matches under `base`, sorted; none is a RowDataError
  naming `what` and every pattern tried."""
  for pattern in patterns:
    found = sorted(p for p in base.glob(pattern) if p.is_file())
    if found:
      return found
  raise RowDataError(f"{base}: no {what}; looked for {', '.join(patterns)} "
                     "(docs/DOWNSTREAM_DATA.md has the download commands)")


def find_split(root: str | pathlib.Path, task: str, split: str) -> list[pathlib.Path]:
  """The files of one split of `task` under `task_folder(root, task)`, sorted; the first
  pattern that matches wins. MMLU-Redux's main-branch `.arrow` files hold only the test
  split. An olmo_data root (`olmo_data.OlmoData.find`) has no such files: its splits are read
  by `load_split`; asking it for the files of a task it lacks names where to get them."""
  source = source_of(task)
  if olmo_data.OlmoData.find(root) is not None:
    raise RowDataError(olmo_data.absent(task) if task not in olmo_data.HF_FOLDERS else
                       f"{root}: olmo_data's {task} is read with load_split, not as files")
  patterns = split_patterns(source, split)
  if not source.configs and split != "test":
    patterns = [p for p in patterns if not p.endswith(".arrow")]
  return match_split(task_folder(root, task), patterns,
                     f"{split!r} files of {task} ({source.repo}, revision {source.revision})")


# ---- row readers -----------------------------------------------------------------------------
def clean_hellaswag(text: str) -> str:
  """HellaSwag's WikiHow markup removed as OLMES's requests show it (`olmo_data`'s
  `oe_eval_tasks/hellaswag`: every request of every regime rendered this way): strip, " [title]"
  → ". " with a period right before it absorbed (lm-eval-harness's `preprocess` would leave
  "diet.. Consume"), every other `[...]` removed, "  " → " " once; no strip at the end (a removed
  leading tag leaves its space: " " + "[substeps] Many" → "  Many"). The paper format cleans the
  raw fields its own way (`paper_format.swag`)."""
  text = re.sub(r"\.? \[title\]", ". ", text.strip())
  text = re.sub(r"\[.*?\]", "", text)
  return text.replace("  ", " ")


def _choices(row: RowReader, field: str = "choices") -> tuple[tuple[str, ...], tuple[str, ...]]:
  """(texts, labels) of a `{text: [...], label: [...]}` field."""
  value = row.get(field, dict)
  for key in ("text", "label"):
    if value.get(key) is None:
      raise row.fail(field, f"missing {key!r}")
  texts = row.strings(field, value=value["text"])
  labels = row.strings(field, value=value["label"])
  if len(texts) != len(labels):
    raise row.fail(field, f"{len(texts)} texts but {len(labels)} labels")
  return texts, labels


def _keyed_answer(row: RowReader, labels: tuple[str, ...], field: str = "answerKey") -> int:
  key = row.get(field, str).strip()
  if key == "":
    return -1
  if key not in labels:
    raise row.fail(field, f"answer {key!r} is not one of the option labels {list(labels)}")
  return labels.index(key)


def _label(row: RowReader, field: str) -> str | int:
  return row.get(field, (int, np.integer, str))


def _winogrande(row: RowReader, task: str, group: str) -> TaskExample:
  del group
  sentence = row.get("sentence", str)
  if "_" not in sentence:
    raise row.fail("sentence", "no blank '_' to fill")
  options = (row.get("option1", str), row.get("option2", str))
  answer = row.index_in("answer", _label(row, "answer"), 2, base=1)
  return TaskExample(task, sentence, options, answer, row.where)


def _hellaswag(row: RowReader, task: str, group: str) -> TaskExample:
  del group
  if row.has(olmo_data.PROCESSED):  # an OLMES doc's text, cleaned once already
    endings = row.strings("endings")
    return TaskExample(task, row.get("ctx", str), endings,
                       row.index_in("label", _label(row, "label"), len(endings)), row.where,
                       row.get("activity_label", str))
  if row.has("ctx_a") and row.has("ctx_b"):
    context = f"{row.get('ctx_a', str)} {row.get('ctx_b', str).capitalize()}"
  else:
    context = row.get("ctx", str)
  # the endings exactly as OLMES scores them (a removed leading tag keeps its space); the
  # question and activity label stripped (OLMES renders the query from the raw fields:
  # `prompts.hellaswag_query`)
  endings = tuple(clean_hellaswag(e) for e in row.strings("endings"))
  answer = row.index_in("label", _label(row, "label"), len(endings))
  activity = clean_hellaswag(row.get("activity_label", str)).strip()
  return TaskExample(task, clean_hellaswag(context).strip(), endings, answer, row.where, activity)


BOOLQ_OPTIONS = ("yes", "no")  # the paper code's order (module docstring)


def _boolq(row: RowReader, task: str, group: str) -> TaskExample:
  del group
  if row.has("answer"):
    truth = int(row.get("answer", bool))
  elif not row.has("label"):
    raise row.fail("answer", "missing (a BoolQ row needs answer: true/false, or super_glue's "
                   "label: 0/1)")
  else:  # super_glue/boolq: label 0 (False) / 1 (True), −1 unlabeled
    truth = row.index_in("label", row.get("label", (int, np.integer)), 2)
  answer = -1 if truth < 0 else BOOLQ_OPTIONS.index("yes" if truth else "no")
  return TaskExample(task, row.get("question", str), BOOLQ_OPTIONS, answer, row.where,
                     passage=row.get("passage", str))


def _mmlu(row: RowReader, task: str, group: str) -> TaskExample:
  choices = row.strings("choices")
  answer = row.index_in("answer", _label(row, "answer"), len(choices), letters=True)
  subject = group or row.get("subject", str)
  return TaskExample(task, row.get("question", str), choices, answer, row.where, subject)


def _openbookqa(row: RowReader, task: str, group: str) -> TaskExample:
  del group
  texts, labels = _choices(row)
  return TaskExample(task, row.get("question_stem", str), texts, _keyed_answer(row, labels),
                     row.where)


def _keyed_question(row: RowReader, task: str, group: str) -> TaskExample:
  """CommonsenseQA and ARC: `question`, `choices` {text, label}, `answerKey`."""
  del group
  texts, labels = _choices(row)
  return TaskExample(task, row.get("question", str), texts, _keyed_answer(row, labels),
                     row.where)


def _socialiqa(row: RowReader, task: str, group: str) -> TaskExample:
  del group
  options = tuple(row.get(f"answer{letter}", str) for letter in "ABC")
  answer = row.index_in("label", _label(row, "label"), 3, base=1)
  return TaskExample(task, row.get("question", str), options, answer, row.where,
                     passage=row.get("context", str))


def _piqa(row: RowReader, task: str, group: str) -> TaskExample:
  del group
  options = (row.get("sol1", str), row.get("sol2", str))
  answer = row.index_in("label", _label(row, "label"), 2)
  return TaskExample(task, row.get("goal", str), options, answer, row.where)


def _xsum(row: RowReader, task: str, group: str) -> TaskExample:
  del group
  return TaskExample(task, row.get("document", str), (row.get("summary", str),), 0, row.where)


READERS: dict[str, Callable[[RowReader, str, str], TaskExample]] = {
    "winogrande": _winogrande, "hellaswag": _hellaswag, "boolq": _boolq, "mmlu": _mmlu,
    "mmlu_redux": _mmlu, "openbookqa": _openbookqa, "commonsenseqa": _keyed_question,
    "socialiqa": _socialiqa, "arc_easy": _keyed_question, "arc_challenge": _keyed_question,
    "piqa": _piqa, "xsum": _xsum}


# ---- reading a split -------------------------------------------------------------------------
@dataclasses.dataclass
class TaskSplit:
  """The examples of one split and what was counted reading them: `rows`, `unlabeled`
  (answer −1), for XSum `empty_document` (skipped rows) and, for MMLU-Redux,
  `error_type=<type>`."""
  task: str
  split: str
  files: list[pathlib.Path]
  examples: list[TaskExample]
  counts: collections.Counter

  def check_size(self) -> None:
    """Raise unless a whole evaluation split has the SPEC §11 number of rows."""
    source = TASK_SOURCES[self.task]
    if self.split == source.eval_split and self.counts["rows"] != source.eval_size:
      raise RowDataError(f"{self.task} {self.split}: {self.counts['rows']} rows in "
                         f"{len(self.files)} files, expected {source.eval_size} (SPEC §11)")


def _subject_of(task: str, base: pathlib.Path, path: pathlib.Path) -> str:
  """MMLU-Redux's subject: the first folder under the task folder (rows carry none)."""
  return path.relative_to(base).parts[0] if task == "mmlu_redux" else ""


RAW_FIELDS = {"hellaswag": ("activity_label", "ctx_a", "ctx_b", "ctx", "endings"),  # the paper
              "mmlu_redux": ("error_type", "correct_answer")}  # format reads them as written


def with_row_fields(example: TaskExample, raw: dict) -> TaskExample:
  """`example` with the row's id (`key`: HellaSwag's `source_id`, else `id`) and the raw fields
  of `RAW_FIELDS` (missing or null ones are left out; a list field as `name[i]` per item)."""
  key = raw.get("source_id" if example.task == "hellaswag" else "id")
  kept = []
  for field in RAW_FIELDS.get(example.task, ()):
    value = raw.get(field)
    if isinstance(value, (list, tuple, np.ndarray)):
      kept += [(f"{field}[{i}]", str(v)) for i, v in enumerate(value)]
    elif value is not None:
      kept.append((field, str(value)))
  return dataclasses.replace(example, key="" if key is None else str(key), raw=tuple(kept))


def load_split(task: str, root: str | pathlib.Path, split: str | None = None,
               limit: int | None = None, olmes_docs: bool = False) -> TaskSplit:
  """Every row of one split (default: the evaluation split) of `task` under `root`, in file
  then row order; `limit` keeps the first ones. `olmes_docs`: an olmo_data root's split read
  from OLMES's processed docs even where hf_datasets has its rows (`olmo_data.doc_rows`)."""
  source = source_of(task)
  split = split or source.eval_split
  reader, counts, examples = READERS[task], collections.Counter(), []
  parts = _split_rows(task, root, split, olmes_docs)
  files = [path for path, _, _ in parts]
  for path, group, rows in parts:
    for index, raw in enumerate(rows):
      row = RowReader(path, index, raw)
      if task == "xsum" and raw.get("document") == "":
        counts["rows"] += 1  # the paper code skips the empty article (test: 11,333 of 11,334)
        counts["empty_document"] += 1
        continue
      try:
        example = reader(row, task, group)
      except ValueError as error:
        if isinstance(error, RowDataError):
          raise
        raise RowDataError(f"{path}: row {index + 1}: {error}") from None
      example = with_row_fields(example, raw)
      counts["rows"] += 1
      counts["unlabeled"] += example.answer < 0
      if task == "mmlu_redux":
        counts[f"error_type={raw.get('error_type') or 'none'}"] += 1
      examples.append(example)
      if limit is not None and len(examples) >= limit:
        return TaskSplit(task, split, files, examples, counts)
  return TaskSplit(task, split, files, examples, counts)


def _split_rows(task: str, root, split: str, olmes_docs: bool = False):
  """(path, group, rows) per file of one split: Hub files under `root`, or olmo_data's Arrow
  members (MMLU: per subject, the subject as group) or OLMES docs (`olmo_data.doc_rows`)."""
  data = olmo_data.OlmoData.find(root)
  if data is None:
    base = task_folder(root, task)
    return [(path, _subject_of(task, base, path), read_rows(path))
            for path in find_split(root, task, split)]
  members = [] if olmes_docs else data.split_files(task, split)
  if members:
    return [(pathlib.Path(data.where(m)), m.split("/")[-3] if task == "mmlu" else "",
             data.arrow_rows(m)) for m in members]
  rows, where = olmo_data.doc_rows(data, task, split)
  return [(pathlib.Path(where), "", rows)]


def read_task(task: str, root: str | pathlib.Path, split: str | None = None,
              limit: int | None = None) -> list[TaskExample]:
  """The examples of one split (default: the evaluation split); `load_split` also gives the
  counts (unlabeled rows are kept, with answer −1). A split without rows is refused (an
  accuracy over 0 items would be NaN)."""
  loaded = load_split(task, root, split, limit)
  if not loaded.examples:
    raise RowDataError(f"{task} {loaded.split}: no rows in "
                       f"{', '.join(map(str, loaded.files))}")
  return loaded.examples


# ---- demonstrations --------------------------------------------------------------------------
Demonstrations = list[TaskExample] | dict[str, list[TaskExample]]


def _first_labeled(split: TaskSplit, shots: int, what: str) -> list[TaskExample]:
  labeled = [x for x in split.examples if x.answer >= 0][:shots]
  if len(labeled) < shots:
    raise RowDataError(f"{what}: {len(labeled)} labeled rows in {split.split} "
                       f"({', '.join(map(str, split.files))}), {shots} demonstrations needed")
  return labeled


def _by_subject(split: TaskSplit, shots: int, task: str) -> dict[str, list[TaskExample]]:
  subjects: dict[str, list[TaskExample]] = {}
  for x in split.examples:
    subjects.setdefault(x.group, [])
    if x.answer >= 0 and len(subjects[x.group]) < shots:
      subjects[x.group].append(dataclasses.replace(x, task=task))
  for subject, chosen in subjects.items():
    if len(chosen) < shots:
      raise RowDataError(f"mmlu {split.split}: subject {subject!r} has {len(chosen)} labeled "
                         f"rows, {shots} demonstrations needed")
  return subjects


def demonstrations(task: str, root: str | pathlib.Path, *,
                   mmlu_root: str | pathlib.Path | None = None) -> Demonstrations:
  """The fixed demonstrations of `task` (SPEC §11).

  Every task but MMLU / MMLU-Redux: a list of the first `SHOTS[task]` labeled rows of its
  demonstration split (train), the same list for every target example.
  MMLU: a dict subject → the first 5 labeled rows of that subject's validation split (read
  from `all/validation`, in which each subject's rows keep their order).
  MMLU-Redux has no train or validation split: the same dict, read from MMLU's validation split
  under `mmlu_root` (required), its examples re-tagged `task="mmlu_redux"` so a prompt's shots
  and target share one task. `shots_for` picks an example's shots from either form.
  An olmo_data root gives OLMES's fixed demonstrations instead (`olmes_demonstrations`: 5 for
  every task, as its request files hold them; SPEC §11).
  """
  source = source_of(task)
  if not source.shots:
    raise RowDataError(f"{task} has no demonstrations (it is fine-tuned on its "
                       f"{source.demo_split} split, SPEC §11)")
  data = olmo_data.OlmoData.find(root)
  if data is not None and task in olmo_data.OLMES_SHOTS:  # OLMES's own fixed demonstrations
    return olmes_demonstrations(task, root)
  if task == "mmlu_redux":
    if mmlu_root is None:
      raise RowDataError("mmlu_redux demonstrations are MMLU's validation shots: pass "
                         "mmlu_root, the cais/mmlu download folder")
    split = load_split("mmlu", mmlu_root, TASK_SOURCES["mmlu"].demo_split)
    return _by_subject(split, source.shots, task)
  split = load_split(task, root, source.demo_split)
  if task == "mmlu":
    return _by_subject(split, source.shots, task)
  return _first_labeled(split, source.shots, task)


def olmes_demonstrations(task: str, root, shots: int | None = None) -> list[TaskExample]:
  """The first `shots` (default all 5) of OLMES's fixed demonstrations of `task`, read from the
  train docs of the olmo_data at `root` (`olmo_data.OLMES_SHOTS`)."""
  wanted = olmo_data.OLMES_SHOTS.get(task, ())
  shots = len(wanted) if shots is None else shots
  if shots > len(wanted):
    raise RowDataError(f"{task}: OLMES lists {len(wanted)} demonstrations, {shots} asked for")
  train = load_split(task, root, "train")
  if wanted and max(wanted[:shots]) >= len(train.examples):
    raise RowDataError(f"{train.files[0]}: {len(train.examples)} train docs, OLMES's "
                       f"demonstrations of {task} need row {max(wanted[:shots])}")
  return [train.examples[i] for i in wanted[:shots]]


def shots_for(demos: Demonstrations, example: TaskExample) -> list[TaskExample]:
  """The demonstrations that precede `example`: its subject's for MMLU / MMLU-Redux."""
  if isinstance(demos, list):
    return demos
  if example.group not in demos:
    raise RowDataError(f"{example.source}: no demonstrations for subject {example.group!r} "
                       f"(subjects: {', '.join(sorted(demos))})")
  return demos[example.group]
