"""The GTCA parse cache (SPEC §10): token ids → span tree, in SQLite, and its builder CLI.

**Key** = sha256 hex of the unpadded (already left-truncated) token ids as little-endian uint32
(`cache_key`). **Value** = the `spans.SpanTree` JSON (chunk ranges and the m_t = 0 ranges).
**Meta** table: the identity the values depend on — `tokenizer` (sha256 of the tokenizer's JSON),
`parser` (sha256 of the parser folder's files, or `given` for trees supplied in the data),
`prompt_format` (`prompts.PromptFormat`: max_len, chat template, BOS, answer tokens) — plus
`backbone` and `format` for information. Opening a cache with a different value for any identity key the caller
gives is refused (`StaleCacheError`); readers pass at least the tokenizer, and can rebuild the
prompt format the cache was built with by `PromptFormat.from_meta(cache.meta)`.
`ParseCache.get(ids, example)` on a miss raises `CacheMissError` naming the example: a run never
continues silently without structure.

CLI:
  python -m slm_jax.gtca.cache (--data=FILE.jsonl | --task=SET --data_root=DIR [--split=S]
      [--limit=N] | --ptb=FILES) (--backbone=HF_FOLDER|tokenizer.json | --workdir=RUN
      [--options=N]) --out=cache.sqlite [--shard=i/n] [--parser=DIR|benepar[:MODEL]|right_branching|random]
      [--max_len=N] [--chat_template=auto|on|off] [--bos] [--block=256]
  python -m slm_jax.gtca.cache --merge --out=cache.sqlite
Records: `--data` JSON lines, MCQA `{"id", "question", "options": [...], "context"?}` or
`{"id", "sentence"}`, with an optional `tree` (PTB text, one tree per sentence of the context and
question fields in order) used instead of parsing; `--task` one split (default: the evaluation
split) of a real set in its Hugging Face layout (`slm_jax.gtca.mcqa_data`: cloth, mmlu,
hellaswag, winogrande, cola), unlabeled rows counted and left out, or `--task=blimp`
(`--data_root` = BLiMP's folder of `<UID>.jsonl`, read by `slm_jax.eval.blimp.load_blimp`; no
`--split`; `--limit=N`: the first N pairs *per paradigm*): both sentences of every pair as
sentence records (`UID:pair:good|bad`; BLiMP repeats sentences across pairs: counted as
duplicates, stored once); `--ptb` PTB files as sentence records with their own trees (what the
UUAS probe's GTCA switch reads). `--backbone` is a Hugging Face checkpoint (its tokenizer, BOS,
chat template); `--workdir` a slm_jax training run, whose prompt tokenizer is the word
vocabulary plus the prompt words of `--options` letters (default: the set's option count, else
the records' largest, at least 2; BLiMP and CoLA: 2, so give the run's count) — the one
`slm_jax.gtca.backbone` gives the trainer. Without `--parser` the shipped GUM parser is loaded,
only if some record has no tree; `right_branching` / `random` are the weak-parser and random-tree
ablations' parsers (no model; a random tree is drawn from a seed of the sentence's words);
`benepar[:MODEL]` is the Berkeley parser of the parse extra (`cache_records.BeneparWords`; the
model is never downloaded here: a missing one says how to obtain it).
`--max_len` (default: the backbone's context, `slm_jax.gtca.backbone.backbone_context` — a
checkpoint's `max_position_embeddings`, a workdir's `data.seq_len`; 0: no limit; an explicit
value wins over the context) bounds a row: MCQA prompts are cut from the left to max_len − 1
tokens so the answer letter still fits, sentence prompts to max_len.
`--shard=i/n` takes the records with index ≡ i (mod n) and writes
`cache.shard-0000i-of-0000n.sqlite` beside `--out` (n = 1: `--out` itself);
`--merge` joins all n shard files into `--out` (refused while a shard is missing or the shards'
identities differ). A rerun skips keys already present and counts them (`cached already`), so a
killed run resumes; rows are committed every block. Progress goes to stderr (done/total, rate,
ETA); at the end the counts: examples, parsed, cached already, duplicates (same ids as another
record), truncated, errors (each kept example error is listed, and the exit code is 1), and for
`--task` the rows read and the unlabeled rows left out (BLiMP: paradigms, pairs, sentences).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import pathlib
import re
import sqlite3
import sys
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from slm_jax import cli
from slm_jax.gtca import cache_records
from slm_jax.gtca.mcqa_data import SETS
from slm_jax.gtca.prompts import PromptError, PromptFormat, TextTokenizer
from slm_jax.gtca.spans import K, SpanError, SpanTree, heights, parse_sentences, span_tree

FORMAT = "gtca-span-cache-v1"
GIVEN = "given"
_SQL_BATCH = 500
_KEPT_ERRORS = 20


class CacheMissError(LookupError):
  """No span tree for an example's token ids."""


class StaleCacheError(ValueError):
  """A cache built with another tokenizer / parser / prompt format."""


def cache_key(ids: Sequence[int] | np.ndarray) -> str:
  """sha256 hex of the token ids as little-endian uint32 (unpadded: exactly the example's ids)."""
  ids = np.asarray(ids)
  if ids.ndim != 1 or (ids.size and (not np.issubdtype(ids.dtype, np.integer) or ids.min() < 0
                                     or ids.max() > 0xFFFFFFFF)):
    raise ValueError(f"cache_key needs a 1-D sequence of token ids in [0, 2^32), got shape "
                     f"{ids.shape} dtype {ids.dtype}")
  return hashlib.sha256(ids.astype("<u4").tobytes()).hexdigest()


class ParseCache:
  """SQLite key → span tree JSON, with the identity check of the module docstring."""

  def __init__(self, path: str | pathlib.Path, identity: Mapping[str, str], *,
               writable: bool = False, info: Mapping[str, str] | None = None):
    self.path = pathlib.Path(path)
    if not writable and not self.path.is_file():
      raise FileNotFoundError(f"parse cache {self.path} not found: build it with "
                              "python -m slm_jax.gtca.cache")
    if writable:
      self.path.parent.mkdir(parents=True, exist_ok=True)
    uri = self.path.resolve().as_uri() + ("" if writable else "?mode=ro")
    self._db = sqlite3.connect(uri, uri=True)
    if writable:
      self._db.execute("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT)")
      self._db.execute("CREATE TABLE IF NOT EXISTS spans (key TEXT PRIMARY KEY, tree TEXT)")
    try:
      self.meta = dict(self._db.execute("SELECT name, value FROM meta"))
    except sqlite3.DatabaseError as error:
      raise ValueError(f"parse cache {self.path} is not a GTCA span cache ({error})") from None
    if not self.meta and writable:
      self.meta = {"format": FORMAT, **(info or {}), **identity}
      with self._db:
        self._db.executemany("INSERT INTO meta VALUES (?, ?)", sorted(self.meta.items()))
    if self.meta.get("format") != FORMAT:
      raise StaleCacheError(f"parse cache {self.path} has format {self.meta.get('format')!r}, "
                            f"this code reads {FORMAT!r}")
    for name, value in identity.items():
      if self.meta.get(name) != value:
        raise StaleCacheError(
            f"parse cache {self.path} was built with {name} {self.meta.get(name)!r}, not "
            f"{value!r}: a cache from another {name} is refused (rebuild it, or point at the "
            "right one)")

  def __len__(self) -> int:
    return int(self._db.execute("SELECT COUNT(*) FROM spans").fetchone()[0])

  def __enter__(self) -> "ParseCache":
    return self

  def __exit__(self, *exc) -> None:
    self.close()

  def close(self) -> None:
    self._db.close()

  def present(self, keys: Iterable[str]) -> set[str]:
    """The keys among `keys` that have a value."""
    keys = list(keys)
    found: set[str] = set()
    for start in range(0, len(keys), _SQL_BATCH):
      chunk = keys[start:start + _SQL_BATCH]
      found.update(k for (k,) in self._db.execute(
          f"SELECT key FROM spans WHERE key IN ({','.join('?' * len(chunk))})", chunk))
    return found

  def get(self, ids: Sequence[int] | np.ndarray, example: str = "?") -> SpanTree:
    """The span tree of these ids; CacheMissError (naming `example`) when there is none."""
    key = cache_key(ids)
    row = self._db.execute("SELECT tree FROM spans WHERE key = ?", (key,)).fetchone()
    if row is None:
      raise CacheMissError(
          f"parse cache {self.path}: no span tree for example {example} ({len(ids)} tokens, key "
          f"{key[:16]}…): build it with python -m slm_jax.gtca.cache over the same data and "
          "prompt format")
    tree = SpanTree.from_json(row[0])
    if tree.n_tokens != len(ids):
      raise ValueError(f"parse cache {self.path}: example {example}'s span tree covers "
                       f"{tree.n_tokens} tokens, the ids have {len(ids)} (corrupt cache)")
    return tree

  def put_many(self, items: Iterable[tuple[str, SpanTree]]) -> None:
    """Stores (key, tree) pairs in one transaction (a key already present keeps its value)."""
    with self._db:
      self._db.executemany("INSERT OR IGNORE INTO spans VALUES (?, ?)",
                           ((key, tree.to_json()) for key, tree in items))


def shard_path(out: str | pathlib.Path, index: int, count: int) -> pathlib.Path:
  """Where shard i of n writes: `--out` itself when n = 1."""
  out = pathlib.Path(out)
  if count == 1:
    return out
  return out.with_name(f"{out.stem}.shard-{index:05d}-of-{count:05d}{out.suffix}")


def merge_shards(out: str | pathlib.Path) -> tuple[int, int]:
  """Joins every `shard_path(out, i, n)` into `out`; (shards, rows in out). Refused while a shard
  is missing or two shards' metas differ."""
  out = pathlib.Path(out)
  pattern = re.compile(re.escape(out.stem) + r"\.shard-(\d{5})-of-(\d{5})" + re.escape(out.suffix))
  found = collections.defaultdict(dict)
  for path in out.parent.glob(f"{out.stem}.shard-*"):
    match = pattern.fullmatch(path.name)
    if match:
      found[int(match.group(2))][int(match.group(1))] = path
  if len(found) != 1:
    what = "none" if not found else f"shard counts {sorted(found)}"
    raise cli.CliError(f"--merge: need the shard files of one run beside {out}, found {what}")
  (count, shards), = found.items()
  missing = [i for i in range(count) if i not in shards]
  if missing:
    raise cli.CliError(f"--merge: shards {missing} of {count} are missing beside {out}",
                       exit_code=cli.EXIT_INCOMPLETE)
  metas = []
  for i in range(count):
    with sqlite3.connect(shards[i].resolve().as_uri() + "?mode=ro", uri=True) as db:
      metas.append(dict(db.execute("SELECT name, value FROM meta")))
  identity = {k: v for k, v in metas[0].items() if k not in ("format", "backbone")}
  for i, meta in enumerate(metas):
    if {k: v for k, v in meta.items() if k not in ("format", "backbone")} != identity:
      raise StaleCacheError(f"--merge: shard {i} ({shards[i]}) was built with another identity "
                            f"than shard 0: {meta} vs {metas[0]}")
  with ParseCache(out, identity, writable=True, info={"backbone": metas[0].get("backbone", "")}
                  ) as target:
    for i in range(count):
      with target._db:  # pylint: disable=protected-access
        target._db.execute("ATTACH DATABASE ? AS shard", (str(shards[i]),))
        target._db.execute("INSERT OR IGNORE INTO spans SELECT key, tree FROM shard.spans")
      target._db.execute("DETACH DATABASE shard")
    return count, len(target)


def parser_identity(folder: str | pathlib.Path) -> str:
  """sha256 over the parser folder's files (names and bytes, sorted by name)."""
  digest = hashlib.sha256()
  for path in sorted(p for p in pathlib.Path(folder).iterdir() if p.is_file()):
    if path.suffix in (".json", ".safetensors", ".npz", ".msgpack") and path.name != "summary.json":
      digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
  return f"{pathlib.Path(folder).name} sha256:{digest.hexdigest()}"


@dataclasses.dataclass
class BuildReport:
  examples: int = 0  # records of this shard
  parsed: int = 0  # span trees built and stored now
  cached: int = 0  # keys already in the cache (a rerun)
  duplicates: int = 0  # ids equal to another record's of this run
  truncated: int = 0  # prompts cut from the left to max_len
  errors: int = 0  # records that produced no span tree
  split_sentences: int = 0  # sentences longer than the parser's max_words, parsed in pieces
  over_k: int = 0  # stored trees with more than K nodes at some height (the branch cuts them)
  messages: list[str] = dataclasses.field(default_factory=list)

  def error(self, message: str) -> None:
    self.errors += 1
    if len(self.messages) < _KEPT_ERRORS:
      self.messages.append(message)

  def summary(self) -> str:
    return (f"examples {self.examples}, parsed {self.parsed}, cached already {self.cached}, "
            f"duplicates {self.duplicates}, truncated {self.truncated}, errors {self.errors}, "
            f"long sentences split {self.split_sentences}, trees over K={K} at a height "
            f"{self.over_k}")


def _trees_of(record: Mapping[str, Any], example: str):
  from slm_jax import ptb  # pylint: disable=import-outside-toplevel
  try:
    trees = ptb.parse_trees(str(record["tree"]), source=f"example {example} tree")
  except ptb.TreeError as error:
    raise SpanError(f"example {example}: malformed tree: {error}") from None
  if not trees:
    raise SpanError(f"example {example}: the `tree` field holds no tree")
  return trees


def build_cache(records: Sequence[tuple[str, Mapping[str, Any]]], tokenizer: TextTokenizer,
                cache: ParseCache, fmt: PromptFormat, parser_factory: Callable[[], Any] | None,
                block: int = 256, progress: Callable[[int, int], None] | None = None
                ) -> BuildReport:
  """Stores the span tree of every (id, record) not yet cached (see the module docstring).
  `parser_factory()` gives a parser (`slm_jax.parser.api.Parser`) the first time a record has no
  `tree`; None: such records are errors."""
  report = BuildReport(examples=len(records))
  parser = None
  seen: set[str] = set()
  for first in range(0, len(records), block):
    todo = []  # (example, prompt, key, trees or None)
    rows = records[first:first + block]
    prompts = []
    for example, record in rows:
      try:
        prompt = fmt.prompt(record, tokenizer, example)
      except PromptError as error:
        report.error(str(error))
        continue
      report.truncated += prompt.truncated > 0
      prompts.append((example, record, prompt, cache_key(prompt.ids_T)))
    present = cache.present(key for *_, key in prompts)
    for example, record, prompt, key in prompts:
      if key in seen:  # stored by this run already (an earlier block): another record's ids
        report.duplicates += 1
      elif key in present:
        report.cached += 1
      else:
        seen.add(key)
        todo.append([example, record, prompt, key, None])
    sentences, owners = [], []
    for item in todo:
      example, record, prompt = item[:3]
      if "tree" in record:
        try:
          item[4] = _trees_of(record, example)
        except SpanError as error:
          report.error(str(error))
          item[4] = error
        continue
      if parser is None:
        if parser_factory is None:
          report.error(f"example {example}: no `tree` field and no parser")
          item[4] = SpanError("no parser")
          continue
        parser = parser_factory()
      split = collections.Counter()
      words = parse_sentences(prompt, parser.max_words, split)
      report.split_sentences += split["split_sentences"]
      sentences.extend(words)
      owners.extend([id(item)] * len(words))
      item[4] = []
    if sentences:
      parsed = _parse(parser, sentences, report)
      by_item = collections.defaultdict(list)
      for owner, tree in zip(owners, parsed):
        by_item[owner].append(tree)
      for item in todo:
        if id(item) in by_item:
          trees = by_item[id(item)]
          item[4] = (SpanError(f"example {item[0]}: the parser failed") if None in trees
                     else trees)
          if None in trees:
            report.error(str(item[4]))
    done = []
    for example, _, prompt, key, trees in todo:
      if isinstance(trees, Exception):
        continue
      try:
        tree = span_tree(prompt, trees)
      except SpanError as error:
        report.error(str(error))
        continue
      report.over_k += heights(tree)[1] > 0
      done.append((key, tree))
    cache.put_many(done)
    report.parsed += len(done)
    if progress is not None:
      progress(min(first + block, len(records)), len(records))
  return report


def _parse(parser, sentences: list[list[str]], report: BuildReport) -> list:
  """Parser trees for `sentences`; if the batch fails, sentence by sentence (None: failed)."""
  try:
    return list(parser.parse(sentences))
  except Exception:  # pylint: disable=broad-except
    out = []
    for words in sentences:
      try:
        out.append(parser.parse([words])[0])
      except Exception as error:  # pylint: disable=broad-except
        report.messages.append(f"parser failed on {' '.join(words)[:80]!r}: {error}")
        out.append(None)
    return out


def read_records(path: str | pathlib.Path, index: int, count: int,
                 report_errors: list[str]) -> list[tuple[str, dict]]:
  """(id, record) of the lines i ≡ index (mod count); an unreadable line is an error message."""
  path = pathlib.Path(path)
  if not path.is_file():
    raise FileNotFoundError(f"--data {path} not found")
  out, line_index = [], -1
  with path.open(encoding="utf-8") as handle:
    for number, line in enumerate(handle, 1):
      if not line.strip():
        continue
      line_index += 1
      if line_index % count != index:
        continue
      try:
        record = json.loads(line)
        if not isinstance(record, dict):
          raise ValueError(f"a JSON object is needed, got {type(record).__name__}")
      except ValueError as error:
        report_errors.append(f"{path}:{number}: {error}")
        continue
      out.append((str(record.get("id", f"{path.name}:{number}")), record))
  return out


def _max_len(backbone: pathlib.Path, flag: int | None) -> int | None:
  """The row limit: an explicit --max_len (0: none), else the backbone's context — a
  workdir's data.seq_len, a checkpoint folder's max_position_embeddings (`backbone_context`)."""
  if flag is not None:
    return flag or None  # 0: no limit
  from slm_jax.gtca.backbone import backbone_context  # pylint: disable=g-import-not-at-top
  return backbone_context(backbone)


def _records(args, index: int, count: int, bad_lines: list[str]):
  """(records, counts of a --task split or None)."""
  sources = [flag for flag in ("data", "task", "ptb") if getattr(args, flag)]
  if len(sources) != 1:
    raise cli.CliError("give one of --data, --task (with --data_root) or --ptb")
  if args.task:
    if not args.data_root:
      raise cli.CliError("--task needs --data_root (the set's Hugging Face download)")
    return cache_records.task_records(args.task, args.data_root, args.split, args.limit or None,
                                      index, count)
  if args.ptb:
    return cache_records.ptb_records(args.ptb.split(","), index, count), None
  return read_records(args.data, index, count, bad_lines), None


def _parser_of(arg: str | None, records) -> tuple[Callable[[], Any] | None, str]:
  """(parser factory or None, the parser identity stored in the cache's meta)."""
  if arg in cache_records.WEAK_PARSERS:
    return (lambda: cache_records.WeakParser(arg)), arg
  if not any("tree" not in record for _, record in records):
    return None, GIVEN
  if arg and (arg == "benepar" or arg.startswith("benepar:")):
    parser = cache_records.BeneparWords(arg.partition(":")[2] or None)
    return (lambda: parser), parser.identity
  from slm_jax.parser import api  # pylint: disable=import-outside-toplevel  (JAX: only to parse)
  parser_dir = pathlib.Path(arg) if arg else api.SHIPPED
  if not parser_dir.is_dir():
    raise FileNotFoundError(f"--parser {parser_dir}: not a folder")
  return (lambda: api.load_parser(parser_dir)), parser_identity(parser_dir)


def main(argv: list[str] | None = None) -> int:
  parser = cli.ArgumentParser(prog="python -m slm_jax.gtca.cache",
                              description=__doc__.split("\n\n")[0])
  parser.add_argument("--data", help="JSONL records (MCQA or sentence, optional `tree`)")
  parser.add_argument("--task", choices=tuple(SETS), help="a real set read from --data_root")
  parser.add_argument("--data_root", help="the set's Hugging Face download (or their parent)")
  parser.add_argument("--split", help="the split of --task (default: its evaluation split)")
  parser.add_argument("--limit", type=int, default=0,
                      help="only the first N examples (blimp: N pairs per paradigm; 0: all)")
  parser.add_argument("--ptb", help="PTB files/folders (comma-separated): sentence records with "
                      "their own trees, for the UUAS probe's GTCA switch")
  parser.add_argument("--backbone", help="Hugging Face checkpoint folder or tokenizer.json")
  parser.add_argument("--workdir", help="instead of --backbone: a slm_jax training run")
  parser.add_argument("--options", type=int, default=None,
                      help="--workdir: option letters of the prompt tokenizer (default: the "
                      "set's, else the records' largest, at least 2)")
  parser.add_argument("--out", required=True, help="the SQLite cache (shards write beside it)")
  cli.add_shard_argument(parser, "records")
  parser.add_argument("--parser", default=None,
                      help="parser folder (default: the shipped GUM), benepar[:MODEL] (the "
                      "parse extra; MODEL a name in NLTK_DATA or a path, default benepar_en3), "
                      "or right_branching / random (the weak-parser / random-tree ablations)")
  parser.add_argument("--max_len", type=int, default=None,
                      help="left-truncate so a row (prompt + answer letter) has at most N "
                      "tokens (default: the backbone's context — a checkpoint's "
                      "max_position_embeddings, a workdir's data.seq_len; 0: never); an "
                      "explicit N wins, larger or smaller — the trainer reads it from the cache")
  parser.add_argument("--chat_template", choices=("auto", "on", "off"), default="auto",
                      help="wrap prompts in the backbone's chat template (auto: if it has one)")
  parser.add_argument("--bos", action="store_true", help="prepend the backbone's BOS token")
  parser.add_argument("--block", type=int, default=256, help="records per parse batch")
  parser.add_argument("--merge", action="store_true", help="join the shard files into --out")
  args = parser.parse_args(argv)
  if args.merge:
    count, rows = merge_shards(args.out)
    print(f"merged {count} shards into {args.out}: {rows} span trees")
    return cli.EXIT_OK
  if bool(args.backbone) == bool(args.workdir):
    raise cli.CliError("give --backbone (a Hugging Face checkpoint) or --workdir (a slm_jax run)"
                       ", one of them (or --merge)")
  index, count = args.shard
  bad_lines: list[str] = []
  records, task_counts = _records(args, index, count, bad_lines)
  if args.workdir:
    from slm_jax.gtca.backbone import workdir_prompt_tokenizer  # pylint: disable=g-import-not-at-top
    backbone = pathlib.Path(args.workdir)
    options = args.options or cache_records.default_options(args.task, records)
    tokenizer = workdir_prompt_tokenizer(backbone, options)
  else:
    backbone = pathlib.Path(args.backbone)
    tokenizer = TextTokenizer.load(backbone)
  chat = args.chat_template == "on" or (args.chat_template == "auto"
                                        and tokenizer.chat_template is not None)
  fmt = PromptFormat(max_len=_max_len(backbone, args.max_len), chat=chat, bos=args.bos)
  factory, parser_id = _parser_of(args.parser, records)
  identity = {"tokenizer": tokenizer.identity, **fmt.to_meta(), "parser": parser_id}
  out = shard_path(args.out, index, count)
  with ParseCache(out, identity, writable=True, info={"backbone": str(backbone)}) as cache:
    report = build_cache(records, tokenizer, cache, fmt, factory, block=max(1, args.block),
                         progress=cli.Progress("gtca cache", unit="examples"))
    total = len(cache)
  report.examples += len(bad_lines)
  for message in bad_lines:
    report.error(message)
  if task_counts is not None:
    print(cache_records.task_summary(args.task, task_counts))
  print(f"{out}: {report.summary()}; {total} span trees in the cache")
  for message in report.messages:
    print(f"  {message}", file=sys.stderr)
  if report.errors:
    print(f"error: {report.errors} records produced no span tree (listed above, first "
          f"{_KEPT_ERRORS}); they will be cache misses", file=sys.stderr)
    return cli.EXIT_INCOMPLETE
  return cli.EXIT_OK


if __name__ == "__main__":
  sys.exit(cli.run(main))
