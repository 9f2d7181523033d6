"""The parse stage: raw documents → documents of normalized PTB trees, sharded and resumable.

For each work unit of this shard (`readers.shard_units`): read documents → split into sentences
(`splitting`) → look every sentence up in the cache → parse the misses in length-sorted batches →
normalize (SPEC §1: POS and the TOP wrapper dropped, function tags stripped) → write the unit's
part file (JSONL lines `{"id", "trees": ["(S …)", …]}`, or Parquet with columns id, text) and its
report, each atomically (temporary name, then rename). The shard folder records what made it
(`identity.json`, `shard_record`: backend identity and the options that change a part); the CLI
refuses a rerun with another backend or such option, naming the differing keys. A rerun skips units whose report exists and
counts them from it, so a killed run resumes where it stopped; `--force` redoes units, and the
cache (SQLite, keyed by backend identity + the sentence's leaves) still makes it parse nothing
twice. The pass-through backend reads the trees in the text instead
(`tree_documents.documents_of_text`: lenient, counted).

Every document and sentence that does not come out is counted by reason in the shard's report
(`report.json`, an `accounting.StageCounts`): unreadable or empty documents, sentences longer than
--max_words, parser failures, malformed or empty parser output, malformed trees (pass-through).

Layout under --output:
  shard-00003-of-00016/part-FFFFF-PPPPPP.jsonl   one per unit (F: file index, P: row group/block)
  shard-00003-of-00016/part-FFFFF-PPPPPP.report.json
  shard-00003-of-00016/report.json               the shard's merged counts (written at the end)
  shard-00003-of-00016/identity.json             what made the shard (backend, options)
  cache/parse-cache-00003-of-00016.sqlite        default --cache_dir (use local disk at scale)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
import sqlite3
import time
from typing import Iterable, Sequence

from slm_jax import identity, ptb
from slm_jax.data.accounting import StageCounts
from slm_jax.data.parse_reports import REPORT_NAME, shard_dir
from slm_jax.data.tree_documents import documents_of_text
from slm_jax.inputs import PARSE_INPUTS, discover
from slm_jax.parse import readers
from slm_jax.parse.backends import ParseFailure, ParserBackend
from slm_jax.splitting import Sentence, Splitter, default_splitter

_SQL_BATCH = 500


@dataclasses.dataclass(frozen=True)
class StageOptions:
  text_field: str = "text"
  id_field: str = "id"
  input_format: str = "auto"  # auto | parquet | jsonl | text
  output_format: str = "jsonl"  # jsonl | parquet
  max_words: int = 200  # longer sentences are skipped (counted): parsers cap their input length
  batch_sentences: int = 256  # sentences per backend call
  cache_dir: str | None = ""  # "" = <output>/cache; None = no cache
  force: bool = False  # redo units that are already done
  jsonl_block: int = readers.JSONL_BLOCK


class SentenceCache:
  """Content-hash → normalized tree (or failure reason), in SQLite."""

  def __init__(self, path: str | pathlib.Path):
    pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
    self._db = sqlite3.connect(str(path))
    self._db.execute("CREATE TABLE IF NOT EXISTS parses (key BLOB PRIMARY KEY, tree TEXT, "
                     "failure TEXT)")
    self.hits = 0

  @staticmethod
  def key(identity: str, sentence: Sentence) -> bytes:
    return hashlib.blake2b(f"{identity}\x00{sentence.key}".encode("utf-8"),
                           digest_size=16).digest()

  def get_many(self, keys: Sequence[bytes]) -> dict[bytes, str | ParseFailure]:
    found: dict[bytes, str | ParseFailure] = {}
    for start in range(0, len(keys), _SQL_BATCH):
      chunk = list(keys[start:start + _SQL_BATCH])
      rows = self._db.execute(
          f"SELECT key, tree, failure FROM parses WHERE key IN ({','.join('?' * len(chunk))})",
          chunk)
      for key, tree, failure in rows:
        found[key] = ParseFailure(failure) if failure is not None else tree
    self.hits += len(found)
    return found

  def put_many(self, items: Iterable[tuple[bytes, str | ParseFailure]]) -> None:
    rows = [(k, None, v.reason) if isinstance(v, ParseFailure) else (k, v, None)
            for k, v in items]
    self._db.executemany("INSERT OR REPLACE INTO parses VALUES (?, ?, ?)", rows)
    self._db.commit()

  def close(self) -> None:
    self._db.close()


def _normalized(tree_text: str, report: ptb.ReadReport) -> str | ParseFailure:
  """One parser output line → the normalized tree's bracketed text, or why not."""
  trees = ptb.parse_trees(tree_text, source="<parser output>", lenient=True, report=report)
  if len(trees) != 1:
    return ParseFailure("malformed parser output" if not report.empty_after_normalization
                        else "empty after normalization")
  return ptb.format_tree(trees[0])


class _UnitParser:
  """Parses the documents of one unit with the cache and the backend; counts everything."""

  def __init__(self, backend: ParserBackend, splitter: Splitter | None,
               cache: SentenceCache | None, options: StageOptions):
    self.backend, self.splitter, self.cache, self.options = backend, splitter, cache, options

  def run(self, documents: Sequence[readers.RawDocument],
          counts: StageCounts) -> list[tuple[str, list[str]]]:
    if self.backend.reads_trees:
      return self._pass_through(documents, counts)
    kept: list[tuple[str, list[Sentence]]] = []
    for doc in documents:
      counts.documents_in += 1
      if doc.problem:
        counts.drop("documents", doc.problem)
        continue
      sentences = self.splitter.split(doc.text) if doc.text.strip() else []
      if not sentences:
        counts.drop("documents", "empty document")
        continue
      counts.sentences_in += len(sentences)
      counts.tokens_in += sum(len(s) for s in sentences)
      kept.append((doc.id, sentences))
    results = self._parse_all([s for _, ss in kept for s in ss if len(s) <= self.options.max_words])
    out = []
    for doc_id, sentences in kept:
      trees = []
      for sentence in sentences:
        if len(sentence) > self.options.max_words:
          counts.drop("sentences", f"longer than --max_words={self.options.max_words}")
          counts.drop("tokens", "sentence longer than --max_words", len(sentence))
          continue
        result = results[sentence.key]
        if isinstance(result, ParseFailure):
          counts.drop("sentences", result.reason)
          counts.drop("tokens", "sentence not parsed", len(sentence))
          continue
        trees.append(result)
        counts.sentences_out += 1
        counts.tokens_out += len(sentence)
      if trees:
        counts.documents_out += 1
        out.append((doc_id, trees))
      else:
        counts.drop("documents", "no sentence parsed")
    return out

  def _parse_all(self, sentences: list[Sentence]) -> dict[str, str | ParseFailure]:
    unique = {s.key: s for s in sentences}
    results: dict[str, str | ParseFailure] = {}
    identity = self.backend.identity
    keys = {text: SentenceCache.key(identity, s) for text, s in unique.items()}
    if self.cache is not None:
      cached = self.cache.get_many(list(keys.values()))
      results.update((text, cached[key]) for text, key in keys.items() if key in cached)
    missing = sorted((s for text, s in unique.items() if text not in results), key=len)
    report = ptb.ReadReport()
    size = self.options.batch_sentences
    for start in range(0, len(missing), size):
      batch = missing[start:start + size]
      parsed = self.backend.parse(batch)
      if len(parsed) != len(batch):
        raise RuntimeError(f"backend {identity} returned {len(parsed)} trees for {len(batch)} "
                           "sentences")
      fresh = {s.key: (r if isinstance(r, ParseFailure) else _normalized(r, report))
               for s, r in zip(batch, parsed)}
      results.update(fresh)
      if self.cache is not None:
        self.cache.put_many((keys[text], value) for text, value in fresh.items())
    return results

  def _pass_through(self, documents: Sequence[readers.RawDocument],
                    counts: StageCounts) -> list[tuple[str, list[str]]]:
    out = []
    for doc in documents:
      counts.documents_in += 1
      if doc.problem:
        counts.drop("documents", doc.problem)
        continue
      for doc_id, trees in documents_of_text(doc.id, doc.text, counts):
        words = sum(len(t.leaves()) for t in trees)
        counts.tokens_in += words
        counts.tokens_out += words
        counts.documents_out += 1
        out.append((doc_id, [ptb.format_tree(t) for t in trees]))
    return out


def _atomic_write(path: pathlib.Path, write) -> None:
  """`write(tmp)` then rename to `path`; a failed write (a full disk) leaves no temporary file."""
  tmp = path.with_name("." + path.name + ".tmp")
  try:
    write(tmp)
  except BaseException:
    tmp.unlink(missing_ok=True)
    raise
  tmp.rename(path)


def _write_part(path: pathlib.Path, documents: list[tuple[str, list[str]]], fmt: str) -> None:
  def write(tmp: pathlib.Path) -> None:
    if fmt == "parquet":
      import pyarrow as pa  # pylint: disable=g-import-not-at-top
      import pyarrow.parquet as pq  # pylint: disable=g-import-not-at-top
      # An explicit schema: a part without documents must still hold string columns.
      table = pa.table({"id": [d for d, _ in documents],
                        "text": ["\n".join(trees) for _, trees in documents]},
                       schema=pa.schema([("id", pa.string()), ("text", pa.string())]))
      pq.write_table(table, tmp)
    else:
      with open(tmp, "w", encoding="utf-8") as f:
        for doc_id, trees in documents:
          f.write(json.dumps({"id": doc_id, "trees": trees}, ensure_ascii=False) + "\n")

  _atomic_write(path, write)


def _write_json(path: pathlib.Path, data: dict) -> None:
  _atomic_write(path, lambda tmp: tmp.write_text(json.dumps(data, indent=1)))


IDENTITY_FILE = "identity.json"


def shard_record(backend: ParserBackend, options: StageOptions) -> dict:
  """What makes a shard's parts: the backend (its identity: name, model digest) and the options
  that change a part's content (not the cache, the batch size nor --force)."""
  record = {"backend": backend.identity, "text_field": options.text_field,
            "id_field": options.id_field, "input_format": options.input_format,
            "output_format": options.output_format}
  if not backend.reads_trees:  # pass-through trees are never split nor capped
    record["max_words"] = options.max_words
  return record


def check_shard(directory: pathlib.Path, record: dict) -> None:
  """Refuses a shard folder made by another backend or options (its parts would count as done):
  the one identity rule (`slm_jax.identity`); a folder from before identity records is judged by
  the backend its report names. Reads only."""
  hint = "use another --output (or move the shard folder away)"
  what = f"{directory} holds another parse"
  if identity.check_record(directory / IDENTITY_FILE, record, what=what, where="in the folder",
                           hint=hint):
    return
  report = identity.read_record(directory / REPORT_NAME)
  if report is not None and report.get("backend") != record["backend"]:
    raise identity.IdentityError(f"{what} (backend: {report.get('backend')!r} in the folder, "
                                 f"{record['backend']!r} now); {hint}")


def claim_shard(output: str | pathlib.Path, index: int, count: int,
                record: dict) -> pathlib.Path:
  """The shard folder of `output`, checked (`check_shard`) and then marked with `record`
  (`identity.json`, written atomically) before any part is written: what the shard CLI and the
  Beam pipeline's workers both do first."""
  directory = shard_dir(output, index, count)
  check_shard(directory, record)
  directory.mkdir(parents=True, exist_ok=True)
  identity.write_record(directory / IDENTITY_FILE, record)
  return directory


@dataclasses.dataclass
class ShardResult:
  directory: pathlib.Path
  counts: StageCounts
  units_done: int  # parsed in this run
  units_resumed: int  # already done by an earlier run
  seconds: float


def run_shard(inputs: Sequence[str | pathlib.Path], output: str | pathlib.Path,
              backend: ParserBackend, *, shard: tuple[int, int] = (0, 1),
              options: StageOptions = StageOptions(),
              splitter: Splitter | None = None) -> ShardResult:
  """Parses shard `shard` of `inputs` into `output` (see the module docstring)."""
  started = time.time()
  index, count = shard
  if options.output_format not in ("jsonl", "parquet"):
    raise ValueError(f"--output_format must be jsonl or parquet, got {options.output_format!r}")
  files = discover(inputs, PARSE_INPUTS, options.input_format)
  units = readers.shard_units(readers.list_units(files, options.jsonl_block), index, count)
  directory = shard_dir(output, index, count)
  directory.mkdir(parents=True, exist_ok=True)
  if not backend.reads_trees and splitter is None:
    splitter = default_splitter()
  cache = None
  if options.cache_dir is not None:
    cache_dir = pathlib.Path(options.cache_dir or pathlib.Path(output) / "cache")
    cache = SentenceCache(cache_dir / f"parse-cache-{index:05d}-of-{count:05d}.sqlite")
  parser = _UnitParser(backend, splitter, cache, options)
  calls_before = backend.calls
  total = StageCounts()
  done = resumed = 0
  suffix = ".parquet" if options.output_format == "parquet" else ".jsonl"
  try:
    for unit in units:
      part = directory / f"part-{unit.name}{suffix}"
      report_path = directory / f"part-{unit.name}.report.json"
      if report_path.exists() and part.exists() and not options.force:
        total.merge(StageCounts.from_json(json.loads(report_path.read_text())["counts"]))
        resumed += 1
        continue
      counts = StageCounts()
      documents = list(readers.read_unit(unit, text_field=options.text_field,
                                         id_field=options.id_field,
                                         jsonl_block=options.jsonl_block))
      parsed = parser.run(documents, counts)
      _write_part(part, parsed, options.output_format)
      _write_json(report_path, {"unit": dataclasses.asdict(unit), "counts": counts.to_json()})
      total.merge(counts)
      done += 1
  finally:
    if cache is not None:
      total.notes["sentences from the cache"] += cache.hits
      cache.close()
  total.notes["sentences parsed"] += backend.calls - calls_before
  _write_json(directory / REPORT_NAME, {
      "shard": [index, count], "backend": backend.identity, "units": len(units),
      "units_done": done, "units_resumed": resumed, "counts": total.to_json()})
  return ShardResult(directory, total, done, resumed, time.time() - started)
