"""The GTCA parse cache (SPEC §10): token ids → span tree, in SQLite.

**Key** = sha256 hex of the unpadded (already left-truncated) token ids as little-endian uint32
(`cache_key`). **Value** = the `spans.SpanTree` JSON (chunk ranges and the m_t = 0 ranges).
**Meta** table: the identity the values depend on — `tokenizer` (sha256 of the tokenizer's JSON),
`parser` (sha256 of the parser folder's files, or `given` for trees supplied in the data),
`prompt_format` (`prompts.PromptFormat`: max_len, chat template, BOS, answer tokens) — plus
`backbone` and `format` for information. Opening a cache with a different value for any identity
key the caller gives is refused (`StaleCacheError`); readers pass at least the tokenizer, and can rebuild the
prompt format the cache was built with by `PromptFormat.from_meta(cache.meta)`.
`ParseCache.get(ids, example)` on a miss raises `CacheMissError` naming the example: a run never
continues silently without structure. A file that is no such cache — a folder, a database of
another schema, a corrupt one — is `NotACacheError`: `FILE: not a GTCA span cache (…)`; a stored
tree that cannot be read (malformed JSON, another span format, a tree of the wrong length) is
`CorruptRecordError`: `FILE: record KEY: …`, naming the example that asked for it.

Shards: `shard_path(out, i, n)` is where shard i of n writes (`cache.shard-0000i-of-0000n.sqlite`
beside `out`; n = 1: `out` itself); `merge_shards(out)` joins all n into `out` (refused while a
shard is missing or the shards' identities differ). The builder is `slm_jax.gtca.cache_builder`,
its CLI `python -m slm_jax.gtca.cache`.
"""

from __future__ import annotations

import collections
import hashlib
import pathlib
import re
import sqlite3
from typing import Iterable, Mapping, Sequence

import numpy as np

from slm_jax import cli
from slm_jax.gtca.spans import SpanTree

FORMAT = "gtca-span-cache-v1"
GIVEN = "given"  # the parser identity of trees supplied in the data
_SQL_BATCH = 500


class CacheMissError(LookupError):
  """No span tree for an example's token ids."""


class StaleCacheError(ValueError):
  """A cache built with another tokenizer / parser / prompt format."""


class NotACacheError(cli.CliError, ValueError):
  """The file is no GTCA span cache: a folder, another SQLite schema, a corrupt database; the
  one-line contract `FILE: not a GTCA span cache (…)`."""

  def __init__(self, path: pathlib.Path, why: str):
    super().__init__(f"{path}: not a GTCA span cache ({why})")


class CorruptRecordError(cli.CliError, ValueError):
  """One stored span tree cannot be read: `FILE: record KEY: what (example E); rebuild`."""

  def __init__(self, path: pathlib.Path, key: str, why: str, example: str):
    super().__init__(f"{path}: record {key}: {why} (example {example}); rebuild the cache with "
                     "python -m slm_jax.gtca.cache (or delete this file)")


def _read_meta(db: sqlite3.Connection, path: pathlib.Path) -> dict[str, str]:
  """The meta table of an opened database; NotACacheError for another schema or a corrupt
  file (no meta or spans table, a meta without the format key, SQLite refusing to read it)."""
  try:
    tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    missing = sorted({"meta", "spans"} - tables)
    if missing:
      raise NotACacheError(path, f"no {' or '.join(missing)} table; tables: "
                           f"{', '.join(sorted(tables)) or 'none'}")
    meta = dict(db.execute("SELECT name, value FROM meta"))
    db.execute("SELECT key, tree FROM spans LIMIT 1").fetchall()
  except sqlite3.Error as error:
    raise NotACacheError(path, f"{type(error).__name__}: {error}") from None
  return meta


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
    if self.path.is_dir():
      raise NotACacheError(self.path, "a folder; give the cache's .sqlite file")
    if not writable and not self.path.is_file():
      raise FileNotFoundError(f"parse cache {self.path} not found: build it with "
                              "python -m slm_jax.gtca.cache")
    fresh = writable and not self.path.exists()
    if writable:
      self.path.parent.mkdir(parents=True, exist_ok=True)
    uri = self.path.resolve().as_uri() + ("" if writable else "?mode=ro")
    try:
      self._db = sqlite3.connect(uri, uri=True)
      if fresh:
        self._db.execute("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT)")
        self._db.execute("CREATE TABLE IF NOT EXISTS spans (key TEXT PRIMARY KEY, tree TEXT)")
    except sqlite3.Error as error:
      raise NotACacheError(self.path, f"{type(error).__name__}: {error}") from None
    self.meta = _read_meta(self._db, self.path)
    if self.meta and "format" not in self.meta:
      raise NotACacheError(self.path, "its meta table has no format entry")
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
    try:
      tree = SpanTree.from_json(row[0])
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as error:
      why = f"{type(error).__name__}: {error}" if isinstance(error, KeyError) else str(error)
      raise CorruptRecordError(self.path, key, f"not a span tree ({why})", example) from None
    if tree.n_tokens != len(ids):
      raise CorruptRecordError(self.path, key, f"the span tree covers {tree.n_tokens} tokens, "
                               f"the ids have {len(ids)}", example)
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
    with ParseCache(shards[i], {}) as shard:
      metas.append(shard.meta)
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
