"""Readers for the paper's MCQA sets from local files in their Hugging Face dataset layouts.

Every reader returns `McqaExample`s (question text, option texts, answer index, where it came
from), the one record the prompt builder and the scorer take. Files are read by
`slm_jax.data.rows.read_rows` (Parquet, Arrow, JSON lines, JSON). A row without a field the
layout needs, or with a value of the wrong shape, is a `McqaDataError` (the same class as
`slm_jax.data.rows.RowDataError`) naming the file, the row and the field.

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
import pathlib
from typing import Callable, Sequence

import numpy as np

from slm_jax.data.rows import LETTERS, RowDataError, RowReader, read_rows  # noqa: F401

# The generic part lives in `slm_jax.data.rows`; these names stay for GTCA and its callers.
McqaDataError = RowDataError
_Row = RowReader


@dataclasses.dataclass(frozen=True)
class McqaExample:
  """One multiple-choice question; `answer` is the index of the right option (−1: unlabeled)."""
  question: str
  options: tuple[str, ...]
  answer: int
  source: str  # "file:row"
  group: str = ""  # subject (MMLU), activity (HellaSwag)


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
