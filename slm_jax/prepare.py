"""Parsed documents → ArrayRecord shards of documents, and `DocumentSource` to read them back.

  python -m slm_jax.prepare --output=prepared/gum ../shared/data/gum/const
  python -m slm_jax.prepare --output=prepared/fineweb --shard=3/16 parsed/fineweb

Inputs: PTB files/folders (one document per file, or one per tree with --sentences_as_documents),
JSONL files (one document per line: `{"id": …, "trees": ["(S …)", …]}` or `{"ptb": "(S …) (S …)"}`),
Parquet files with PTB trees in a `text` column, and folders of the parse stage's output
(`python -m slm_jax.parse`, JSONL or Parquet parts). Trees are read
with the SPEC §1 normalization; malformed trees and empty documents are dropped and counted by
reason (lenient by default; --strict stops at the first problem with its file and line).

Sharding: input files, in sorted path order, are dealt round-robin to `--shard=i/n`; shard i
writes `documents-{i}-of-{n}-{j}.array_record` (j = a new file every --records_per_file documents)
and `manifest-{i}-of-{n}.json` (format, version, files with their record counts, accounting), so
many hosts can prepare one corpus into one folder. `DocumentSource` checks that all n manifests
are there.

Record format `slm_jax.document` version 1 (one record per document, little-endian): the document's
word-level lin1 base sequence (`linearize.base_sequence`: `<s> (S Cats (VP chase mice VP) S) …
</s>`), which every configuration derives from, so one prepared corpus serves every
linearization and tokenizer:
  header  24 bytes: magic b"SLMD", u8 version (1), 3 zero bytes, u32 T (tokens), u32 S
          (sentences), u32 I (id bytes), u32 Y (symbol bytes)
  u32[S]  tokens per sentence (BOS counts with the first sentence, EOS with the last)
  i8[T]   kinds (`slm_jax.kinds.Kind`: BOS, TERMINAL, ONT, CNT, EOS)
  I bytes document id, UTF-8
  Y bytes the T symbols, UTF-8, joined by single spaces (PTB words never contain whitespace)
Decoding is a split and two `frombuffer`s (no tree parsing on the training hot path);
`DocumentRecord.trees()` gives the trees back (`delinearize`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import pathlib
import struct
import sys
import time
from typing import Iterator, Sequence as SequenceT

import numpy as np

from slm_jax import ptb
from slm_jax.data.accounting import Accounting, StageCounts
from slm_jax.kinds import Kind
from slm_jax.linearize import Sequence, base_sequence, delinearize
from slm_jax.trees import Tree

_LOG = logging.getLogger(__name__)

RECORD_FORMAT = "slm_jax.document"
RECORD_VERSION = 1
MAGIC = b"SLMD"
_HEADER = struct.Struct("<4sB3xIIII")
JSONL_PATTERNS = ("*.jsonl",)
PARQUET_PATTERNS = ("*.parquet",)
RECORDS_PER_FILE = 100_000


class RecordError(ValueError):
  """A record that is not an `slm_jax.document` record of a supported version."""


# --- record codec --------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class DocumentRecord:
  """A decoded record: document id and its word-level lin1 base sequence."""

  id: str
  base: Sequence

  @property
  def num_sentences(self) -> int:
    return int(self.base.sentence[-1]) + 1 if len(self.base) else 0

  def trees(self) -> list[Tree]:
    return delinearize(self.base.symbols(), self.base.kinds, "lin1")


def encode_record(base: Sequence, doc_id: str = "") -> bytes:
  """Serializes a word-level lin1 base sequence (see the module docstring for the layout)."""
  symbols = [str(s) for s in base.tokens.tolist()]
  text = " ".join(symbols)
  if len(text.split(" ")) != len(symbols) or any(not s for s in symbols):
    bad = next(s for s in symbols if not s or any(c.isspace() for c in s))
    raise RecordError(f"document {doc_id!r}: symbol {bad!r} is empty or contains whitespace")
  lengths = np.bincount(base.sentence, minlength=int(base.sentence[-1]) + 1).astype("<u4")
  id_bytes, symbol_bytes = doc_id.encode("utf-8"), text.encode("utf-8")
  header = _HEADER.pack(MAGIC, RECORD_VERSION, len(base), len(lengths), len(id_bytes),
                        len(symbol_bytes))
  return b"".join([header, lengths.tobytes(), base.kinds.astype(np.int8).tobytes(), id_bytes,
                   symbol_bytes])


def decode_record(data: bytes) -> DocumentRecord:
  if len(data) < _HEADER.size or data[:4] != MAGIC:
    raise RecordError(f"not an {RECORD_FORMAT} record (magic {data[:4]!r}, {len(data)} bytes)")
  _, version, n_tokens, n_sentences, n_id, n_symbols = _HEADER.unpack_from(data)
  if version != RECORD_VERSION:
    raise RecordError(f"{RECORD_FORMAT} record version {version}; this slm_jax reads version "
                      f"{RECORD_VERSION} (re-run python -m slm_jax.prepare)")
  offset = _HEADER.size
  lengths = np.frombuffer(data, "<u4", n_sentences, offset)
  offset += 4 * n_sentences
  kinds = np.frombuffer(data, np.int8, n_tokens, offset).copy()
  offset += n_tokens
  doc_id = data[offset:offset + n_id].decode("utf-8")
  offset += n_id
  symbols = data[offset:offset + n_symbols].decode("utf-8").split(" ")
  if len(symbols) != n_tokens or offset + n_symbols != len(data):
    raise RecordError(f"record {doc_id!r} is corrupt: {len(symbols)} symbols for {n_tokens} "
                      f"kinds, {len(data) - offset - n_symbols} stray bytes")
  tokens = np.empty(n_tokens, dtype=object)
  tokens[:] = symbols
  sentence = np.repeat(np.arange(n_sentences, dtype=np.int32), lengths)
  return DocumentRecord(doc_id, Sequence(tokens, kinds, sentence,
                                         np.arange(n_tokens, dtype=np.int32)))


# --- inputs --------------------------------------------------------------------------------------


def parse_shard(text: str) -> tuple[int, int]:
  """`"3/16"` → (3, 16)."""
  try:
    index, count = (int(part) for part in text.split("/"))
  except ValueError:
    raise ValueError(f"--shard must look like i/n (e.g. 3/16), got {text!r}") from None
  if not 0 <= index < count:
    raise ValueError(f"--shard {text}: need 0 <= i < n")
  return index, count


def input_files(paths: SequenceT[str | os.PathLike], fmt: str = "auto") -> list[tuple[str, str]]:
  """(path, format) of every input file, sorted by path; folders are searched recursively."""
  if fmt not in ("auto", "ptb", "jsonl", "parquet"):
    raise ValueError(f"--format must be auto, ptb, jsonl or parquet, got {fmt!r}")
  found: dict[str, str] = {}
  for entry in paths:
    path = pathlib.Path(entry)
    if path.is_file():
      found[str(path)] = fmt if fmt != "auto" else (
          "jsonl" if path.suffix in (".jsonl", ".json") else
          "parquet" if path.suffix == ".parquet" else "ptb")
    elif path.is_dir():
      jsonl = sorted(p for pattern in JSONL_PATTERNS for p in path.rglob(pattern) if p.is_file())
      parquet = sorted(p for pattern in PARQUET_PATTERNS for p in path.rglob(pattern)
                       if p.is_file())
      if fmt == "jsonl" or (fmt == "auto" and jsonl):
        found.update((str(p), "jsonl") for p in jsonl)
      elif fmt == "parquet" or (fmt == "auto" and parquet):
        found.update((str(p), "parquet") for p in parquet)
      else:
        ptb_files = {p for pattern in ptb.DEFAULT_PATTERNS for p in path.rglob(pattern)
                     if p.is_file()}
        found.update((str(p), "ptb") for p in ptb_files)
    else:
      raise FileNotFoundError(f"input {path} does not exist")
  if not found:
    raise FileNotFoundError(f"no input files under {', '.join(map(str, paths))}")
  return sorted(found.items())


def _read_ptb(path: str, counts: StageCounts, lenient: bool,
              sentences_as_documents: bool) -> Iterator[tuple[str, list[Tree]]]:
  report = ptb.ReadReport()
  trees = ptb.read_file(path, lenient=lenient, report=report)
  counts.add_read_report(report)
  if report.files_skipped:
    counts.documents_in += 1
    counts.drop("documents", "invalid utf-8")
    return
  if sentences_as_documents:
    counts.documents_in += len(trees)
    yield from ((f"{path}#{k}", [tree]) for k, tree in enumerate(trees))
    return
  counts.documents_in += 1
  if not trees:
    counts.drop("documents", "empty document")
    return
  yield path, trees


def _documents_from_text(text: str, where: str, doc_id: str, counts: StageCounts, lenient: bool,
                         sentences_as_documents: bool) -> Iterator[tuple[str, list[Tree]]]:
  """The document(s) of one record's PTB text, reader problems and empty documents counted."""
  report = ptb.ReadReport()
  trees = ptb.parse_trees(text, source=where, lenient=lenient, report=report)
  counts.add_read_report(report)
  if not trees:
    counts.drop("documents", "empty document")
  elif sentences_as_documents:
    counts.documents_in += len(trees) - 1
    yield from ((f"{doc_id}#{k}", [tree]) for k, tree in enumerate(trees))
  else:
    yield doc_id, trees


def _read_jsonl(path: str, counts: StageCounts, lenient: bool,
                sentences_as_documents: bool) -> Iterator[tuple[str, list[Tree]]]:
  with open(path, encoding="utf-8") as f:
    for line_number, line in enumerate(f, 1):
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
      yield from _documents_from_text(text, where, str(obj.get("id", where)), counts, lenient,
                                      sentences_as_documents)


def _read_parquet(path: str, counts: StageCounts, lenient: bool,
                  sentences_as_documents: bool) -> Iterator[tuple[str, list[Tree]]]:
  """Parquet with PTB trees in a `text` column (the parse stage's --output_format=parquet)."""
  from slm_jax.parse import readers  # pylint: disable=g-import-not-at-top
  for group in range(len(readers.parquet_row_groups(path))):
    texts, ids = readers.read_parquet_column(path, group, "text", "id")
    for row, text in enumerate(texts):
      where = f"{path}:{group}:{row}"
      counts.documents_in += 1
      doc_id = str(ids[row]) if ids is not None and ids[row] is not None else where
      yield from _documents_from_text(text or "", where, doc_id, counts, lenient,
                                      sentences_as_documents)


def read_inputs(files: SequenceT[tuple[str, str]], counts: StageCounts, *, lenient: bool = True,
                sentences_as_documents: bool = False) -> Iterator[tuple[str, list[Tree]]]:
  """(document id, trees) of the given input files, in order; drops are counted in `counts`."""
  readers = {"jsonl": _read_jsonl, "parquet": _read_parquet, "ptb": _read_ptb}
  for path, fmt in files:
    reader = readers[fmt]
    yield from reader(path, counts, lenient, sentences_as_documents)


# --- writing -------------------------------------------------------------------------------------


def _shard_name(index: int, count: int) -> str:
  return f"{index:05d}-of-{count:05d}"


class _ShardWriter:
  """ArrayRecord files of one prepare shard, a new file every `records_per_file` documents."""

  def __init__(self, output: pathlib.Path, shard: tuple[int, int], records_per_file: int):
    from array_record.python import array_record_module  # pylint: disable=g-import-not-at-top
    self._writer_cls = array_record_module.ArrayRecordWriter
    self.output, self.shard, self.records_per_file = output, shard, records_per_file
    self.files: list[dict] = []
    self._writer = None
    self._tmp: pathlib.Path | None = None

  def write(self, record: bytes) -> None:
    if self._writer is None or self.files[-1]["documents"] >= self.records_per_file:
      self._close_file()
      name = f"documents-{_shard_name(*self.shard)}-{len(self.files):05d}.array_record"
      self._tmp = self.output / f".{name}.tmp"
      # group_size:1 keeps random access (a global shuffle reads one record at a time) cheap.
      self._writer = self._writer_cls(str(self._tmp), "group_size:1")
      self.files.append({"path": name, "documents": 0})
    self._writer.write(record)
    self.files[-1]["documents"] += 1

  def _close_file(self) -> None:
    if self._writer is not None:
      self._writer.close()
      self._tmp.rename(self.output / self.files[-1]["path"])
      self._writer = None

  def close(self) -> None:
    self._close_file()


@dataclasses.dataclass
class PrepareResult:
  manifest: pathlib.Path
  counts: StageCounts
  seconds: float


def prepare(inputs: SequenceT[str | os.PathLike], output: str | os.PathLike, *,
            shard: tuple[int, int] = (0, 1), fmt: str = "auto", lenient: bool = True,
            sentences_as_documents: bool = False,
            records_per_file: int = RECORDS_PER_FILE) -> PrepareResult:
  """Writes shard `shard` of the prepared corpus under `output`; returns its manifest path."""
  started = time.time()
  out = pathlib.Path(output)
  out.mkdir(parents=True, exist_ok=True)
  index, count = shard
  files = input_files(inputs, fmt)
  mine = files[index::count]
  for stale in out.glob(f"documents-{_shard_name(index, count)}-*.array_record"):
    stale.unlink()  # a rerun of this shard replaces its files
  counts = StageCounts()
  writer = _ShardWriter(out, shard, records_per_file)
  words = 0
  try:
    for doc_id, trees in read_inputs(mine, counts, lenient=lenient,
                                     sentences_as_documents=sentences_as_documents):
      base = base_sequence(trees)
      writer.write(encode_record(base, doc_id))
      counts.documents_out += 1
      counts.tokens_in += len(base)
      counts.tokens_out += len(base)
      words += int(np.count_nonzero(base.kinds == Kind.TERMINAL))
  finally:
    writer.close()
  counts.notes["words"] += words
  counts.notes["input files"] += len(mine)
  manifest = {
      "format": RECORD_FORMAT, "version": RECORD_VERSION,
      "record": "word-level lin1 base sequence (see slm_jax/prepare.py)",
      "shard": [index, count], "files": writer.files,
      "inputs": [path for path, _ in mine],
      "accounting": {"prepare": counts.to_json()},
  }
  path = out / f"manifest-{_shard_name(index, count)}.json"
  tmp = path.with_suffix(".json.tmp")
  tmp.write_text(json.dumps(manifest, indent=1))
  tmp.rename(path)
  return PrepareResult(path, counts, time.time() - started)


# --- reading -------------------------------------------------------------------------------------


class DocumentSource:
  """Random access to prepared documents (a grain `RandomAccessDataSource`): `source[i]` is a
  `DocumentRecord`. `paths`: prepared folders (all their shards, checked complete) or files."""

  def __init__(self, paths: str | os.PathLike | SequenceT[str | os.PathLike]):
    if isinstance(paths, (str, os.PathLike)):
      paths = [paths]
    files: list[str] = []
    self.manifests: list[dict] = []
    for entry in paths:
      entry = pathlib.Path(entry)
      if entry.is_dir():
        manifests = [json.loads(p.read_text()) for p in sorted(entry.glob("manifest-*.json"))]
        if not manifests:
          raise FileNotFoundError(f"{entry}: no manifest-*.json; prepare it with "
                                  f"python -m slm_jax.prepare --output={entry} INPUT…")
        _check_manifests(entry, manifests)
        self.manifests.extend(manifests)
        files.extend(str(entry / f["path"]) for m in manifests for f in m["files"])
      elif entry.is_file():
        files.append(str(entry))
      else:
        raise FileNotFoundError(f"prepared data {entry} does not exist")
    if not files:
      raise ValueError(f"no documents in {', '.join(map(str, paths))} (every shard is empty)")
    import grain  # pylint: disable=g-import-not-at-top
    self.files = files
    self._source = grain.sources.ArrayRecordDataSource(files)
    expected = sum(f["documents"] for m in self.manifests for f in m["files"])
    if self.manifests and len(files) == sum(len(m["files"]) for m in self.manifests) and \
        expected != len(self._source):
      raise RecordError(f"manifests list {expected} documents but the files hold "
                        f"{len(self._source)}; re-run python -m slm_jax.prepare")

  def __len__(self) -> int:
    return len(self._source)

  def __getitem__(self, index: int) -> DocumentRecord:
    return decode_record(self._source[index])

  def raw(self, index: int) -> bytes:
    return self._source[index]

  def words(self) -> Iterator[str]:
    """Every word of every document, in order (e.g. to build a word-level tokenizer)."""
    for index in range(len(self)):
      base = self[index].base
      yield from base.tokens[base.kinds == Kind.TERMINAL].tolist()

  def documents(self, limit: int | None = None) -> list[list[Tree]]:
    """The first `limit` documents (all by default) as trees, e.g. a held-out set in memory."""
    count = len(self) if limit is None else min(limit, len(self))
    return [self[index].trees() for index in range(count)]

  def accounting(self) -> Accounting:
    total = Accounting()
    for manifest in self.manifests:
      total.merge(Accounting.from_json(manifest.get("accounting", {})))
    return total

  def __repr__(self) -> str:
    return f"DocumentSource({len(self.files)} files, {len(self)} documents)"


def _check_manifests(folder: pathlib.Path, manifests: list[dict]) -> None:
  for m in manifests:
    if m.get("format") != RECORD_FORMAT or m.get("version") != RECORD_VERSION:
      raise RecordError(f"{folder}: manifest format {m.get('format')!r} version "
                        f"{m.get('version')!r}; this slm_jax reads {RECORD_FORMAT} version "
                        f"{RECORD_VERSION} (re-run python -m slm_jax.prepare)")
  counts = {m["shard"][1] for m in manifests}
  if len(counts) != 1:
    raise RecordError(f"{folder}: manifests from different --shard counts {sorted(counts)}; "
                      "prepare into separate folders")
  count = counts.pop()
  missing = sorted(set(range(count)) - {m["shard"][0] for m in manifests})
  if missing:
    raise RecordError(f"{folder}: prepared shards missing: {len(missing)} of {count} (e.g. "
                      f"manifest-{_shard_name(missing[0], count)}.json); run "
                      f"python -m slm_jax.prepare --shard={missing[0]}/{count} …")


# --- CLI -----------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(prog="python -m slm_jax.prepare", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("inputs", nargs="+", help="PTB files/folders, JSONL files, parse outputs")
  parser.add_argument("--output", required=True, help="folder for the ArrayRecord shards")
  parser.add_argument("--shard", default="0/1", help="i/n: this host's share of the input files")
  parser.add_argument("--format", default="auto", choices=("auto", "ptb", "jsonl", "parquet"))
  parser.add_argument("--strict", action="store_true",
                      help="stop at the first malformed tree (default: skip and count)")
  parser.add_argument("--sentences_as_documents", action="store_true",
                      help="one document per tree instead of per file / JSONL line")
  parser.add_argument("--records_per_file", type=int, default=RECORDS_PER_FILE)
  return parser


def main(argv: list[str] | None = None) -> int:
  args = _parser().parse_args(argv)
  try:
    result = prepare(args.inputs, args.output, shard=parse_shard(args.shard), fmt=args.format,
                     lenient=not args.strict, sentences_as_documents=args.sentences_as_documents,
                     records_per_file=args.records_per_file)
  except (ValueError, FileNotFoundError, ptb.TreeError) as error:
    print(f"error: {error}", file=sys.stderr)
    return 2
  counts = result.counts
  print(f"{result.manifest}: {counts.summary('prepare')}\n  {counts.tokens_out:,} lin1 tokens in "
        f"{result.seconds:.1f} s ({counts.tokens_out / max(result.seconds, 1e-9):,.0f} tokens/s)")
  return 0


if __name__ == "__main__":
  sys.exit(main())
