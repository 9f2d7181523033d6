"""The XSum training rows a fine-tune reads (SPEC §11): the paper code's 17,904-example subset by
default, or the whole split.

The paper code (qlwpc/TG-Interpolation `datatools/filter_xsum_train_id.py`) trains on the rows of
EdinburghNLP/xsum train whose id is in `datatools/save_ids.json`: the articles of
`lighteval/summarization` `xsum` train mapped to EdinburghNLP ids by whitespace-normalized text
(`normalized`; the last id of a repeated text wins). That lighteval set is HELM's XSum training
data, which HELM's summarization scenario builds by a filter on the article and summary
(`helm_keeps`: 50–150 words, no "Media playback is unsupported on your device" / "Last updated at",
a summary of more than 10 words and at most 0.2 of the article's length). `paper_subset` applies
that filter to the split, maps the kept texts to ids as the paper's script does, and keeps the
rows with those ids in split order. With the published id list at hand, `--xsum_train_ids=FILE`
(a JSON list of ids, e.g. `save_ids.json`) takes it instead of the derived rule.

Modes (`read_training_rows`): `subset` (the derived rule, or the ids of `ids_file`) and `full`.
Empty documents are skipped and counted in every mode (the paper's data preparation drops them).
"""

from __future__ import annotations

import collections
import json
import pathlib
import re
from typing import Sequence

from slm_jax.data.rows import RowDataError, RowReader, read_rows
from slm_jax.downstream import tasks
from slm_jax.downstream.example import TaskExample

MODES = ("subset", "full")
PAPER_SUBSET_SIZE = 17_904  # distinct ids of save_ids.json (17,907 entries)
MIN_WORDS, MAX_WORDS, DOC_MAX_WORDS = 50, 150, 512
MIN_SUMMARY_WORDS, MAX_SUMMARY_RATIO = 10, 0.2
DROPPED_PHRASES = ("Media playback is unsupported on your device", "Last updated at")


def normalized(document: str) -> str:
  """The text key the paper's id mapping uses: whitespace runs → one space, stripped."""
  return re.sub(r"[\s\n]+", " ", document).strip()


def helm_keeps(document: str, summary: str) -> bool:
  """Whether HELM's XSum training filter keeps this article/summary pair."""
  article = " ".join(document.replace("\n", " ").split()[:DOC_MAX_WORDS])
  words = len(article.split())
  if words > MAX_WORDS or words < MIN_WORDS:
    return False
  if any(phrase in article for phrase in DROPPED_PHRASES):
    return False
  summary_words = len(" ".join(summary.replace("\n", " ").split()).split())
  return summary_words > MIN_SUMMARY_WORDS and summary_words / words <= MAX_SUMMARY_RATIO


def paper_subset(rows: Sequence[tuple[str, str, str]]) -> set[str]:
  """The ids the paper trains on, derived from (id, document, summary) rows of the split: the
  HELM-kept texts, each mapped to the last id with that normalized text."""
  last_id = {normalized(document): row_id for row_id, document, _ in rows}
  return {last_id[normalized(document)] for _, document, summary in rows
          if helm_keeps(document, summary)}


def read_ids(path: str | pathlib.Path) -> set[str]:
  """A JSON list of XSum ids (the paper's `save_ids.json`)."""
  path = pathlib.Path(path)
  try:
    ids = json.loads(path.read_text(encoding="utf-8"))
  except (OSError, json.JSONDecodeError) as error:
    raise RowDataError(f"{path}: not a readable JSON list of XSum ids: {error}") from None
  if not isinstance(ids, list) or not all(isinstance(i, (str, int)) for i in ids):
    raise RowDataError(f"{path}: expected a JSON list of XSum ids")
  return {str(i) for i in ids}


def read_training_rows(root: str | pathlib.Path, mode: str = "subset",
                       ids_file: str | pathlib.Path | None = None,
                       limit: int | None = None) -> tuple[list[TaskExample], collections.Counter]:
  """(examples, counts) of the XSum train split of `root` in `mode` (module docstring); counts:
  `rows`, `empty_document`, `kept`, and for `subset` `subset_ids` (distinct ids selected)."""
  if mode not in MODES:
    raise ValueError(f"xsum_train must be one of {', '.join(MODES)}, got {mode!r}")
  rows: list[tuple[RowReader, str, str, str]] = []
  counts: collections.Counter = collections.Counter()
  for path in tasks.find_split(root, "xsum", "train"):
    for index, raw in enumerate(read_rows(path)):
      row = RowReader(path, index, raw)
      counts["rows"] += 1
      document = row.get("document", str)
      if document == "":
        counts["empty_document"] += 1
        continue
      rows.append((row, str(row.get("id", (str, int))), document, row.get("summary", str)))
  keep = None
  if mode == "subset":
    keep = read_ids(ids_file) if ids_file else paper_subset([r[1:] for r in rows])
    counts["subset_ids"] = len(keep)
  examples = []
  for row, row_id, _, _ in rows:
    if keep is None or row_id in keep:
      examples.append(tasks.READERS["xsum"](row, "xsum", ""))
      if limit is not None and len(examples) >= limit:
        break
  counts["kept"] = len(examples)
  if not examples:
    raise RowDataError(f"xsum train under {root}: no row in the {mode} selection ({dict(counts)}); "
                       "--xsum_train=full takes the whole split")
  return examples, counts


__all__ = ["MODES", "PAPER_SUBSET_SIZE", "helm_keeps", "normalized", "paper_subset",
           "read_ids", "read_training_rows"]
