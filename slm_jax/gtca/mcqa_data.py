"""Readers for the paper's MCQA sets from local files in their Hugging Face dataset layouts.

Every reader returns `McqaExample`s (question text, option texts, answer index, where it came
from), the one record the prompt builder and the scorer take. Files are Parquet (`.parquet`, the
Hub's converted splits), JSON lines (`.jsonl`) or JSON (`.json`: an array of rows, or JSON lines).
A row without a field the layout needs, or with a value of the wrong shape, is a
`McqaDataError` naming the file, the row and the field.

Layouts (field names of the Hub dataset cards):
- CLOTH (`AndyChiang/cloth`): `sentence` (the blank written `[MASK]`), `answer` (str),
  `distractors` (list[str]). Options are the answer and the distractors in an order drawn from
  `SeedSequence([seed, row])`, so a file reads the same every time.
- MMLU (`cais/mmlu`): `question`, `choices` (list[str]), `answer` (int index; a letter A–D is
  accepted too), `subject` kept as the example's `group`.
- HellaSwag (`Rowan/hellaswag`): `ctx` (or `ctx_a` + `ctx_b`), `endings` (list[str]), `label`
  (str or int; "" in the unlabeled test split → answer −1), `activity_label` as `group`.
- WinoGrande (`allenai/winogrande`): `sentence` (blank `_`), `option1`, `option2`, `answer`
  ("1" / "2"; "" unlabeled → −1).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Any, Callable, Sequence

import numpy as np

LETTERS = "ABCDEFGH"


class McqaDataError(ValueError):
  """A file that does not fit its dataset's layout; the message names file, row and field."""


@dataclasses.dataclass(frozen=True)
class McqaExample:
  """One multiple-choice question; `answer` is the index of the right option (−1: unlabeled)."""
  question: str
  options: tuple[str, ...]
  answer: int
  source: str  # "file:row"
  group: str = ""  # subject (MMLU), activity (HellaSwag)


def read_rows(path: str | pathlib.Path) -> list[dict[str, Any]]:
  """The rows of a Parquet, JSON-lines or JSON file as dicts."""
  path = pathlib.Path(path)
  if not path.is_file():
    raise McqaDataError(f"{path}: no such file")
  if path.suffix == ".parquet":
    import pyarrow.parquet as pq  # pylint: disable=g-import-not-at-top
    return pq.read_table(path).to_pylist()
  if path.suffix not in (".jsonl", ".json"):
    raise McqaDataError(f"{path}: unknown format {path.suffix!r} (expected .parquet, .jsonl, "
                        ".json)")
  text = path.read_text(encoding="utf-8")
  if path.suffix == ".json" and text.lstrip().startswith("["):
    try:
      rows = json.loads(text)
    except json.JSONDecodeError as e:
      raise McqaDataError(f"{path}: not valid JSON ({e})") from None
  else:
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
      if line.strip():
        try:
          rows.append(json.loads(line))
        except json.JSONDecodeError as e:
          raise McqaDataError(f"{path}:{number}: not valid JSON ({e})") from None
  for i, row in enumerate(rows):
    if not isinstance(row, dict):
      raise McqaDataError(f"{path}: row {i}: expected an object, got {type(row).__name__}")
  return rows


class _Row:
  """Field access with errors naming file, row and field."""

  def __init__(self, path: pathlib.Path, index: int, row: dict):
    self.path, self.index, self.row = path, index, row

  @property
  def where(self) -> str:
    return f"{self.path}:{self.index}"

  def fail(self, field: str, what: str) -> McqaDataError:
    return McqaDataError(f"{self.path}: row {self.index}: field {field!r}: {what}")

  def get(self, field: str, kind: type | tuple[type, ...]) -> Any:
    if field not in self.row or self.row[field] is None:
      raise self.fail(field, "missing")
    value = self.row[field]
    if not isinstance(value, kind):
      raise self.fail(field, f"expected {getattr(kind, '__name__', kind)}, got "
                      f"{type(value).__name__}")
    return value

  def strings(self, field: str, minimum: int = 2) -> tuple[str, ...]:
    value = self.get(field, (list, tuple, np.ndarray))
    value = list(value)
    if len(value) < minimum or not all(isinstance(v, str) for v in value):
      raise self.fail(field, f"expected a list of at least {minimum} strings, got {value!r}")
    return tuple(value)

  def index_in(self, field: str, value: Any, count: int, base: int = 0,
               letters: bool = False) -> int:
    """An answer given as int / numeric string (counted from `base`) or letter; "" → −1."""
    if isinstance(value, str):
      text = value.strip()
      if text == "":
        return -1
      if letters and len(text) == 1 and text.upper() in LETTERS:
        index = LETTERS.index(text.upper())
      elif text.lstrip("-").isdigit():
        index = int(text) - base
      else:
        raise self.fail(field, f"cannot read answer {value!r}")
    elif isinstance(value, (int, np.integer)) and not isinstance(value, bool):
      index = int(value) - base
    else:
      raise self.fail(field, f"cannot read answer {value!r}")
    if not 0 <= index < count:
      raise self.fail(field, f"answer {value!r} is outside the {count} options")
    return index


def _cloth(row: _Row, seed: int) -> McqaExample:
  sentence = row.get("sentence", str)
  answer = row.get("answer", str)
  distractors = row.strings("distractors", minimum=1)
  options = [answer, *distractors]
  order = np.random.default_rng(np.random.SeedSequence([seed, row.index])).permutation(len(options))
  options = [options[i] for i in order]
  return McqaExample(sentence, tuple(options), int(np.argmin(order)), row.where)


def _mmlu(row: _Row, seed: int) -> McqaExample:
  del seed
  choices = row.strings("choices")
  answer = row.index_in("answer", row.get("answer", (int, np.integer, str)), len(choices),
                        letters=True)
  return McqaExample(row.get("question", str), choices, answer, row.where,
                     str(row.row.get("subject") or ""))


def _hellaswag(row: _Row, seed: int) -> McqaExample:
  del seed
  if "ctx" in row.row and row.row["ctx"] is not None:
    context = row.get("ctx", str)
  else:
    context = f"{row.get('ctx_a', str)} {row.get('ctx_b', str)}".strip()
  endings = row.strings("endings")
  label = row.get("label", (int, np.integer, str))
  return McqaExample(context, endings, row.index_in("label", label, len(endings)), row.where,
                     str(row.row.get("activity_label") or ""))


def _winogrande(row: _Row, seed: int) -> McqaExample:
  del seed
  options = (row.get("option1", str), row.get("option2", str))
  answer = row.get("answer", (int, np.integer, str))
  return McqaExample(row.get("sentence", str), options, row.index_in("answer", answer, 2, base=1),
                     row.where)


READERS: dict[str, Callable[[_Row, int], McqaExample]] = {
    "cloth": _cloth, "mmlu": _mmlu, "hellaswag": _hellaswag, "winogrande": _winogrande}


def read_mcqa(dataset: str, paths: str | pathlib.Path | Sequence[str | pathlib.Path], *,
              seed: int = 0, limit: int | None = None) -> list[McqaExample]:
  """The examples of `dataset` (`cloth`, `mmlu`, `hellaswag`, `winogrande`) in `paths`, in file
  then row order; `limit` keeps the first ones."""
  if dataset not in READERS:
    raise McqaDataError(f"unknown MCQA dataset {dataset!r}; expected one of "
                        f"{', '.join(READERS)}")
  reader = READERS[dataset]
  paths = [paths] if isinstance(paths, (str, pathlib.Path)) else list(paths)
  out: list[McqaExample] = []
  for path in paths:
    path = pathlib.Path(path)
    for index, row in enumerate(read_rows(path)):
      out.append(reader(_Row(path, index, row), seed))
      if limit is not None and len(out) >= limit:
        return out
  return out
