"""Prepared corpora on disk: `prepare` writes one shard of ArrayRecord documents and its manifest,
`DocumentSource` reads all shards back (checked complete).

Sharding: input files (`inputs.discover(paths, inputs.TREE_INPUTS)`, sorted by path) are dealt
round-robin to shard `i` of `n`, which writes `documents-{i}-of-{n}-{j}.array_record` (j = a new
file every `records_per_file` documents; one `records.encode_record` record per document) and
`manifest-{i}-of-{n}.json` (record format and version, files with their record counts, inputs,
accounting), so many hosts can prepare one corpus into one folder. Every file is written under a
temporary name and renamed when complete; a rerun of a shard replaces its files.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import time
from typing import Iterator, Sequence as SequenceT

import numpy as np

from slm_jax import inputs
from slm_jax.data.accounting import Accounting, StageCounts
from slm_jax.data.parse_reports import unfinished_parses
from slm_jax.data.records import (RECORD_FORMAT, RECORD_VERSION, DocumentRecord, RecordError,
                                  decode_record, encode_record)
from slm_jax.data.tree_documents import read_tree_inputs
from slm_jax.kinds import Kind
from slm_jax.linearize import base_sequence
from slm_jax.trees import Tree

RECORDS_PER_FILE = 100_000
_RERUN = "python -m slm_jax.prepare"


def shard_name(index: int, count: int) -> str:
  return f"{index:05d}-of-{count:05d}"


def manifest_name(index: int, count: int) -> str:
  return f"manifest-{shard_name(index, count)}.json"


class ShardWriter:
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
      name = f"documents-{shard_name(*self.shard)}-{len(self.files):05d}.array_record"
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

  def abort(self) -> None:
    """Removes everything this writer wrote (a failed or stopped shard leaves no partial file;
    a rerun writes the shard again)."""
    if self._writer is not None:
      self._writer.close()
      self._writer = None
    if self._tmp is not None:
      self._tmp.unlink(missing_ok=True)
    for entry in self.files:
      (self.output / entry["path"]).unlink(missing_ok=True)


def _check_output(out: pathlib.Path, count: int) -> None:
  """An output folder holds shards of one --shard count only (checked before writing)."""
  others = sorted({json.loads(p.read_text()).get("shard", [0, count])[1]
                   for p in out.glob("manifest-*.json")} - {count})
  if others:
    raise RecordError(f"{out} holds shards prepared with --shard=…/{others[0]}, not …/{count}: "
                      "prepare into a new --output folder (or remove the old shards)")


@dataclasses.dataclass
class PrepareResult:
  manifest: pathlib.Path
  counts: StageCounts
  seconds: float


def prepare(paths: SequenceT[str | os.PathLike], output: str | os.PathLike, *,
            shard: tuple[int, int] = (0, 1), fmt: str = "auto", lenient: bool = True,
            sentences_as_documents: bool = False, records_per_file: int = RECORDS_PER_FILE,
            allow_partial: bool = False) -> PrepareResult:
  """Writes shard `shard` of the prepared corpus of `paths` under `output` (see the module
  docstring); malformed trees and empty documents are dropped and counted (lenient), or stop it
  with their file and line (`lenient=False`). An input folder of an unfinished parse (shards
  without a report) is refused unless `allow_partial` (then the missing shards are counted in the
  manifest's notes). A shard that fails leaves no file behind."""
  started = time.time()
  out = pathlib.Path(output)
  index, count = shard
  unfinished = unfinished_parses(paths)
  if unfinished and not allow_partial:
    raise RecordError(f"the parse is not finished: {len(unfinished)} shard(s) without a report "
                      f"(e.g. {unfinished[0]}); finish them (python -m slm_jax.parse --report "
                      "shows which), or pass --allow_partial to prepare what is there")
  mine = inputs.discover(paths, inputs.TREE_INPUTS, fmt)[index::count]
  if out.is_dir():
    _check_output(out, count)
  out.mkdir(parents=True, exist_ok=True)
  for stale in out.glob(f"documents-{shard_name(index, count)}-*.array_record"):
    stale.unlink()  # a rerun of this shard replaces its files
  counts = StageCounts()
  writer = ShardWriter(out, shard, records_per_file)
  words = 0
  try:
    for doc_id, trees in read_tree_inputs(mine, counts, lenient=lenient,
                                          sentences_as_documents=sentences_as_documents):
      base = base_sequence(trees)
      writer.write(encode_record(base, doc_id))
      counts.documents_out += 1
      counts.tokens_in += len(base)
      counts.tokens_out += len(base)
      words += int(np.count_nonzero(base.kinds == Kind.TERMINAL))
    writer.close()
  except BaseException:
    writer.abort()
    raise
  counts.notes["words"] += words
  counts.notes["input files"] += len(mine)
  if unfinished:
    counts.notes["unfinished parse shards (--allow_partial)"] += len(unfinished)
  manifest = {
      "format": RECORD_FORMAT, "version": RECORD_VERSION,
      "record": "word-level lin1 base sequence (see slm_jax/data/records.py)",
      "shard": [index, count], "files": writer.files,
      "inputs": [path for path, _ in mine],
      "accounting": {"prepare": counts.to_json()},
  }
  path = out / manifest_name(index, count)
  tmp = path.with_suffix(".json.tmp")
  try:
    tmp.write_text(json.dumps(manifest, indent=1))
  except BaseException:
    tmp.unlink(missing_ok=True)
    writer.abort()
    raise
  tmp.rename(path)
  return PrepareResult(path, counts, time.time() - started)


def check_manifests(folder: pathlib.Path, manifests: list[dict]) -> None:
  """The manifests of one folder: a readable format and version, one shard count, none missing."""
  for m in manifests:
    if m.get("format") != RECORD_FORMAT or m.get("version") != RECORD_VERSION:
      raise RecordError(f"{folder}: manifest format {m.get('format')!r} version "
                        f"{m.get('version')!r}; this slm_jax reads {RECORD_FORMAT} version "
                        f"{RECORD_VERSION} (re-run {_RERUN})")
  counts = {m["shard"][1] for m in manifests}
  if len(counts) != 1:
    raise RecordError(f"{folder}: manifests from different --shard counts {sorted(counts)}; "
                      "prepare into separate folders")
  count = counts.pop()
  missing = sorted(set(range(count)) - {m["shard"][0] for m in manifests})
  if missing:
    raise RecordError(f"{folder}: prepared shards missing: {len(missing)} of {count} (e.g. "
                      f"{manifest_name(missing[0], count)}); run "
                      f"{_RERUN} --shard={missing[0]}/{count} …")


def _check_file(path: pathlib.Path, expected: int | None, folder: pathlib.Path | None,
                manifest: dict | None) -> None:
  """A prepared file holds the records its manifest lists (a truncated or corrupt file holds
  fewer, often none): else a `RecordError` naming it and the command that rebuilds it."""
  from array_record.python import array_record_module  # pylint: disable=g-import-not-at-top
  if not path.is_file():
    raise RecordError(f"{path}: listed in its manifest but missing")
  try:
    reader = array_record_module.ArrayRecordReader(str(path))
    found = reader.num_records()
    reader.close()
  except Exception as error:  # pylint: disable=broad-except  # riegeli: any unreadable file
    found, why = 0, f" ({type(error).__name__}: {str(error).splitlines()[0][:200]})"
  else:
    why = ""
  if (found == expected) if expected is not None else found > 0:
    return
  if manifest is not None:
    index, count = manifest["shard"]
    inputs = manifest.get("inputs", [])
    shown = " ".join(inputs[:3]) + (" …" if len(inputs) > 3 else "")
    fix = f"rebuild it with {_RERUN} --output={folder} --shard={index}/{count} {shown}"
    listed = f"its manifest lists {expected}"
  else:
    fix, listed = f"re-run {_RERUN}", "a prepared file holds at least one"
  raise RecordError(f"{path}: {found} readable records{why}, {listed}: the file is truncated "
                    f"or corrupt; {fix}")


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
                                  f"{_RERUN} --output={entry} INPUT…")
        check_manifests(entry, manifests)
        self.manifests.extend(manifests)
        for m in manifests:
          for f in m["files"]:
            files.append(str(entry / f["path"]))
            _check_file(entry / f["path"], f["documents"], entry, m)
      elif entry.is_file():
        files.append(str(entry))
        _check_file(entry, None, None, None)
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
                        f"{len(self._source)}; re-run {_RERUN}")

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
