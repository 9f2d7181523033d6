"""THE identity rule of derived outputs: what made an output is recorded next to it and compared
before the output is reused or continued; a difference names every differing key.

A record is a JSON object (nested objects are compared key by key, as dotted paths:
`settings.lr`, `model.d_model`; tuples and lists compare as lists). `differences(saved, now,
ignore)` lists (key, saved value, value now) of every key that differs and is not in `ignore`
(the keys that may change on resume: logging and checkpoint cadence, the step budget, …);
`describe` words them the one way every refusal words them (`lr: 0.003 in the seed folder, 0.001
now`). `read_record` reads a record file (None when absent; an unreadable one is an error naming
the file), `check_record` compares a folder's record with the command's and raises the caller's
error class naming the differing keys.

What names a checkpoint carries a digest of its contents, by THE one rule `content_digest(*paths)`
(a GGUF file, a Hugging Face folder, a training workdir's checkpoint step and tokenizer files:
`train.loading.source_digest` says which files make each): every file's size and relative name,
a hash of its header — a GGUF file's header, metadata and tensor index, a safetensors file's
JSON header —, or of the whole file up to 1 MiB, and of 16 blocks of 4 KiB spread over the rest.
So another model put at the same path (other weights, other vocabulary or shapes) gets another
digest at the cost of reading headers, never whole multi-GB files; a mismatch is refused or
redone by the caller, never reused.

Users: `train.workdir.check_workdir` (a training workdir's config.json), the fine-tuning seed
folders (`finetune.trainer`: finetune.json), the parser's workdirs (`parser.train`:
identity.json), the parse shards (`parse.stage.claim_shard`, for the shard CLI and the Beam
pipeline alike), GTCA runs and stages, the evaluation's item files, and `train.sweep` (a
finished item is reused only when its record matches). Layer 0 (json and `cli` only), so every
layer that writes an output can use it.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import struct
from typing import Any, BinaryIO, Collection, Mapping

from slm_jax import files
from slm_jax.cli import CliError


class IdentityError(CliError):
  """An output holds what another command made (or a record that cannot be read)."""


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
  """Dotted key → value of a nested record (tuples as lists, as JSON stores them)."""
  out: dict[str, Any] = {}
  for key, value in tree.items():
    if isinstance(value, Mapping):
      out.update(flatten(value, f"{prefix}{key}."))
    else:
      out[f"{prefix}{key}"] = list(value) if isinstance(value, tuple) else value
  return out


def differences(saved: Mapping[str, Any], now: Mapping[str, Any],
                ignore: Collection[str] = ()) -> list[tuple[str, Any, Any]]:
  """(dotted key, saved value, value now) of every key that differs and is not in `ignore`
  (a key missing on one side reads as None), sorted by key."""
  before, after = flatten(saved), flatten(now)
  return [(key, before.get(key), after.get(key)) for key in sorted(set(before) | set(after))
          if key not in ignore and before.get(key) != after.get(key)]


def describe(diff: list[tuple[str, Any, Any]], where: str) -> str:
  """`key: saved WHERE, now now; …` — the one wording of a refused identity."""
  return "; ".join(f"{key}: {saved!r} {where}, {now!r} now" for key, saved, now in diff)


def read_record(path: str | pathlib.Path) -> dict[str, Any] | None:
  """The JSON object in `path`, None when there is no such file; a file that is not a JSON
  object raises `IdentityError` naming it."""
  path = pathlib.Path(path)
  if not path.is_file():
    return None
  try:
    record = json.loads(path.read_text(encoding="utf-8"))
  except (json.JSONDecodeError, UnicodeDecodeError) as error:
    raise IdentityError(f"{path}: not a readable record ({error}); move it away or use another "
                        "output folder") from None
  if not isinstance(record, dict):
    raise IdentityError(f"{path}: expected a JSON object, found {type(record).__name__}")
  return record


def write_record(path: str | pathlib.Path, record: Mapping[str, Any]) -> None:
  """Writes `record` atomically (a temporary file renamed over `path`): a kill mid-write leaves
  the old record or the new one, never half of one."""
  path = pathlib.Path(path)
  files.write_text(path, json.dumps(record, indent=1, allow_nan=False) + "\n")


def check_record(path: str | pathlib.Path, now: Mapping[str, Any], *, what: str, where: str,
                 hint: str, ignore: Collection[str] = (),
                 error: type[CliError] = IdentityError) -> bool:
  """Compares the record in `path` with `now`; raises `error` (`"{what} ({differences});
  {hint}"`) when they differ. True when a record was there (and matches), False when there was
  none. Reads only."""
  saved = read_record(path)
  if saved is None:
    return False
  diff = differences(saved, now, ignore)
  if diff:
    raise error(f"{what} ({describe(diff, where)}); {hint}")
  return True


# ---- THE content digest of a checkpoint -----------------------------------------------------
WHOLE_BYTES = 1 << 20  # files up to this size are hashed whole
SAMPLES, SAMPLE_BYTES = 16, 4096  # blocks hashed past a large file's header


def content_digest(*paths: str | pathlib.Path) -> str:
  """The digest of the contents of `paths` (files, or folders: their files, hidden ones left
  out), by the rule in the module docstring; a missing path digests as absent. Names inside a
  folder count; so do the paths' own names when several are given (one file's digest is that of
  its bytes wherever it lies)."""
  digest = hashlib.blake2b(digest_size=12)
  for index, root in enumerate(map(pathlib.Path, paths)):
    label = f"{index}:{root.name if len(paths) > 1 else ''}"
    if not root.exists():
      digest.update(f"{label}:absent\n".encode())
      continue
    found = [root] if root.is_file() else sorted(
        p for p in root.rglob("*") if p.is_file()
        and not any(part.startswith(".") for part in p.relative_to(root).parts))
    for path in found:
      name = "" if path == root else path.relative_to(root).as_posix()
      digest.update(f"{label}/{name}:".encode())
      digest.update(_file_digest(path))
  return digest.hexdigest()


def _file_digest(path: pathlib.Path) -> bytes:
  digest = hashlib.blake2b(digest_size=12)
  size = path.stat().st_size
  digest.update(str(size).encode())
  with path.open("rb") as handle:
    head = _header_bytes(handle, path.suffix.lower(), size)
    handle.seek(0)
    for start in range(0, head, 1 << 22):
      digest.update(handle.read(min(1 << 22, head - start)))
    rest = size - head
    if rest > 0:
      for i in range(SAMPLES):
        handle.seek(head + (max(rest - SAMPLE_BYTES, 0) * i) // (SAMPLES - 1))
        digest.update(handle.read(SAMPLE_BYTES))
  return digest.digest()


def _header_bytes(handle: BinaryIO, suffix: str, size: int) -> int:
  """How many leading bytes are hashed whole: a GGUF / safetensors file's header (at least
  `WHOLE_BYTES` of it, or all of a small file)."""
  head = 0
  try:
    if suffix == ".gguf":
      head = _gguf_header_end(handle, size)
    elif suffix == ".safetensors":
      head = 8 + struct.unpack("<Q", handle.read(8))[0]
  except (struct.error, ValueError, OverflowError):
    head = 0  # not the format its name says: the generic rule
  return min(size, max(head, WHOLE_BYTES))


_GGUF_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def _gguf_header_end(handle: BinaryIO, size: int) -> int:
  """The offset where a GGUF (v2/v3) file's tensor index ends (its header, metadata and tensor
  infos before it); ValueError when the file is not one."""
  u32 = lambda: struct.unpack("<I", handle.read(4))[0]

  def u64() -> int:
    value = struct.unpack("<Q", handle.read(8))[0]
    if value > size:  # a count or length past the file: not a GGUF header
      raise ValueError(f"GGUF header value {value} past the file's {size} bytes")
    return value

  def skip(kind: int) -> None:
    if kind in _GGUF_FIXED:
      handle.seek(_GGUF_FIXED[kind], 1)
    elif kind == 8:  # string
      handle.seek(u64(), 1)
    elif kind == 9:  # array
      inner, count = u32(), u64()
      if inner in _GGUF_FIXED:
        handle.seek(_GGUF_FIXED[inner] * count, 1)
      else:
        for _ in range(count):
          skip(inner)
    else:
      raise ValueError(f"GGUF value type {kind}")

  if handle.read(4) != b"GGUF" or u32() not in (2, 3):
    raise ValueError("not a GGUF v2/v3 file")
  tensors, pairs = u64(), u64()
  for _ in range(pairs):
    skip(8)  # the key
    skip(u32())
  for _ in range(tensors):
    skip(8)  # the name
    handle.seek(8 * u32() + 4 + 8, 1)  # dims, type, offset
  return handle.tell()
