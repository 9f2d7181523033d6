"""Documents of PTB trees, read and counted: the one "PTB text → counted trees" rule.

`documents_of_text(doc_id, text, counts)` reads one document's PTB text (SPEC §1 normalization;
lenient: malformed trees skipped and counted by reason, or strict: `TreeError` with the source
and line) and returns its documents: none when no tree is left (dropped and counted as "empty
document"), one, or one per tree with `sentences_as_documents` (ids `{doc_id}#{k}`). The
document itself is the caller's to count in (`counts.documents_in`), and to count out when it
keeps it. prepare, the streamed Parquet source and the parse stage's pass-through all use it.

`read_tree_inputs(files, counts)` reads the input files of `python -m slm_jax.prepare` (as found by
`inputs.discover(paths, inputs.TREE_INPUTS)`): PTB files (one document per file), JSONL (one
document per line: `{"id": …, "trees": ["(S …)", …]}` or `{"ptb": "(S …) (S …)"}`) and Parquet with
PTB trees in a `text` column (the parse stage's `--output_format=parquet`).
"""

from __future__ import annotations

import json
from typing import Iterator, Sequence as SequenceT

from slm_jax import files, ptb
from slm_jax.data import parquet
from slm_jax.data.accounting import StageCounts
from slm_jax.trees import Tree

Document = tuple[str, list[Tree]]  # (document id, its sentence trees)


def counted_documents(doc_id: str, trees: list[Tree], report: ptb.ReadReport,
                      counts: StageCounts, sentences_as_documents: bool = False) -> list[Document]:
  """The documents of one read document: its read report goes into `counts` (sentences in, out
  and dropped by reason); no trees left: dropped as "empty document"."""
  counts.add_read_report(report)
  if not trees:
    counts.drop("documents", "empty document")
    return []
  if sentences_as_documents:
    counts.documents_in += len(trees) - 1  # the caller counted the document once
    return [(f"{doc_id}#{k}", [tree]) for k, tree in enumerate(trees)]
  return [(doc_id, trees)]


def documents_of_text(doc_id: str, text: str, counts: StageCounts, *, where: str | None = None,
                      lenient: bool = True, sentences_as_documents: bool = False) -> list[Document]:
  """One document's PTB text → its documents, counted (see the module docstring); `where`
  locates problems (default: the id)."""
  report = ptb.ReadReport()
  trees = ptb.parse_trees(text, source=where or doc_id, lenient=lenient, report=report)
  return counted_documents(doc_id, trees, report, counts, sentences_as_documents)


def _read_ptb(path: str, counts: StageCounts, lenient: bool,
              sentences_as_documents: bool) -> Iterator[Document]:
  counts.documents_in += 1
  report = ptb.ReadReport()
  trees = ptb.read_file(path, lenient=lenient, report=report)
  if report.files_skipped:  # lenient and not UTF-8: the whole file is one dropped document
    counts.add_read_report(report)
    counts.drop("documents", ptb.BAD_ENCODING)
    return
  yield from counted_documents(path, trees, report, counts, sentences_as_documents)


def _read_jsonl(path: str, counts: StageCounts, lenient: bool,
                sentences_as_documents: bool) -> Iterator[Document]:
  for line_number, line in files.iter_lines(path):  # on \n only; bad UTF-8 names the line
    if not line.strip():
      continue
    where = f"{path}:{line_number}"
    counts.documents_in += 1
    try:
      obj = json.loads(line)
      trees_field = obj.get("trees", obj.get("ptb")) if isinstance(obj, dict) else None
    except json.JSONDecodeError as error:
      if not lenient:
        raise ValueError(f"{where}: invalid JSON ({error})") from None
      counts.drop("documents", "invalid JSON line")
      continue
    if trees_field is None:
      if not lenient:
        raise ValueError(f"{where}: a record needs 'trees' (list of PTB strings) or 'ptb'")
      counts.drop("documents", "record without trees")
      continue
    text = "\n".join(trees_field) if isinstance(trees_field, list) else str(trees_field)
    yield from documents_of_text(str(obj.get("id", where)), text, counts, where=where,
                                 lenient=lenient, sentences_as_documents=sentences_as_documents)


def _read_parquet(path: str, counts: StageCounts, lenient: bool,
                  sentences_as_documents: bool) -> Iterator[Document]:
  for group in range(len(parquet.row_groups(path))):
    for row, (doc_id, text) in enumerate(parquet.read_rows(path, group)):
      counts.documents_in += 1
      yield from documents_of_text(doc_id, text, counts, where=parquet.row_name(path, group, row),
                                   lenient=lenient, sentences_as_documents=sentences_as_documents)


_READERS = {"jsonl": _read_jsonl, "parquet": _read_parquet, "ptb": _read_ptb}


def read_tree_inputs(files: SequenceT[tuple[str, str]], counts: StageCounts, *,
                     lenient: bool = True,
                     sentences_as_documents: bool = False) -> Iterator[Document]:
  """(document id, trees) of the (path, format) input files, in order; every document read is
  counted in `counts.documents_in`, every drop by reason (the documents yielded are the
  caller's to count out)."""
  for path, fmt in files:
    yield from _READERS[fmt](path, counts, lenient, sentences_as_documents)
