"""Reading and writing a checkpoint's safetensors files, one tensor (or one slice) at a time.

`CheckpointFiles(folder)` indexes `model.safetensors` or a sharded set
(`model.safetensors.index.json` → shard files) from the headers alone: tensor name → file,
shape, dtype. `read(name, index)` returns one slice of one tensor as numpy (bfloat16 through
ml_dtypes), opening the file with `safetensors.safe_open` for that read only, so the pages it
touched are unmapped again and a large checkpoint never sits in host memory as a whole.
`write_checkpoint(folder, tensors)` writes numpy tensors as one file, or as shards with an index
when they exceed `max_shard_bytes` (the layout transformers writes).

Every failure names the file and, where there is one, the tensor: a shard the index lists but
the folder lacks, a file whose header or data is cut short, a tensor the index places in a file
that does not hold it.
"""

from __future__ import annotations

import json
import pathlib
from typing import Iterable

import numpy as np
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
SHARD_BYTES = 5 * 2**30  # transformers' default max_shard_size ("5GB")


class HfCheckpointError(ValueError):
  """A checkpoint folder that cannot be read as safetensors (names the file and tensor)."""


class TensorInfo:
  __slots__ = ("file", "shape", "dtype")

  def __init__(self, file: pathlib.Path, shape: tuple[int, ...], dtype: str):
    self.file, self.shape, self.dtype = file, shape, dtype


def _open(path: pathlib.Path):
  try:
    return safe_open(str(path), framework="numpy")
  except (SafetensorError, OSError) as error:
    raise HfCheckpointError(f"{path}: not a readable safetensors file ({error}); the file may be "
                          "truncated or still downloading") from None


class CheckpointFiles:
  """The tensors of a checkpoint folder (see the module docstring)."""

  def __init__(self, folder: str | pathlib.Path):
    self.folder = pathlib.Path(folder)
    index, single = self.folder / INDEX_FILE, self.folder / SINGLE_FILE
    if index.is_file():
      try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
      except (json.JSONDecodeError, KeyError, TypeError) as error:
        raise HfCheckpointError(f"{index}: not a safetensors index ({error!r})") from None
      files: dict[str, list[str]] = {}
      for name, file in weight_map.items():
        files.setdefault(file, []).append(name)
    elif single.is_file():
      files = {SINGLE_FILE: []}
    else:
      raise HfCheckpointError(f"{self.folder}: neither {SINGLE_FILE} nor {INDEX_FILE} found")
    self.tensors: dict[str, TensorInfo] = {}
    for file, listed in files.items():
      path = self.folder / file
      if not path.is_file():
        raise HfCheckpointError(f"{index}: shard {file} is missing from {self.folder} (it holds "
                              f"{len(listed)} tensors, e.g. {sorted(listed)[0]})")
      with _open(path) as handle:
        names = set(handle.keys())
        for name in names:
          piece = handle.get_slice(name)
          self.tensors[name] = TensorInfo(path, tuple(piece.get_shape()), piece.get_dtype())
      absent = sorted(set(listed) - names)
      if absent:
        raise HfCheckpointError(f"{index} places tensor {absent[0]} in {file}, which does not "
                              f"hold it ({len(absent)} such tensors)")

  def __contains__(self, name: str) -> bool:
    return name in self.tensors

  def info(self, name: str) -> TensorInfo:
    if name not in self.tensors:
      raise HfCheckpointError(f"{self.folder}: tensor {name} not found in the checkpoint files")
    return self.tensors[name]

  def nbytes(self) -> int:
    """Size of the tensor files on disk."""
    return sum(p.stat().st_size for p in {t.file for t in self.tensors.values()})

  def read(self, name: str, index: tuple[slice, ...] | None = None) -> np.ndarray:
    """Tensor `name`, or its slice `index` (one slice per dimension), as a numpy array."""
    info = self.info(name)
    with _open(info.file) as handle:
      try:
        piece = handle.get_slice(name)
        return np.asarray(piece[index] if index is not None else piece[:])
      except (SafetensorError, OSError) as error:
        raise HfCheckpointError(f"{info.file}: cannot read tensor {name} ({error})") from None


def write_checkpoint(folder: str | pathlib.Path,
                     tensors: dict[str, np.ndarray] | Iterable[tuple[str, np.ndarray]], *,
                     max_shard_bytes: int = SHARD_BYTES) -> list[pathlib.Path]:
  """Writes `tensors` (a dict, or (name, array) pairs streamed one at a time) as safetensors in
  `folder`: one `model.safetensors`, or shards + index above `max_shard_bytes`. At most one
  shard is held in memory."""
  folder = pathlib.Path(folder)
  folder.mkdir(parents=True, exist_ok=True)
  items = tensors.items() if isinstance(tensors, dict) else tensors
  written: list[tuple[pathlib.Path, list[str]]] = []
  shard: dict[str, np.ndarray] = {}
  size = total = 0

  def flush():
    path = folder / f"shard-{len(written):05d}.tmp"
    save_file(shard, str(path), metadata={"format": "pt"})
    written.append((path, list(shard)))

  for name, array in items:
    if shard and size + array.nbytes > max_shard_bytes:
      flush()
      shard, size = {}, 0
    shard[name] = np.ascontiguousarray(array)
    size += array.nbytes
    total += array.nbytes
  flush()
  if len(written) == 1:
    return [written[0][0].replace(folder / SINGLE_FILE)]
  paths, weight_map = [], {}
  for i, (temporary, names) in enumerate(written):
    path = temporary.replace(folder / f"model-{i + 1:05d}-of-{len(written):05d}.safetensors")
    weight_map.update({name: path.name for name in names})
    paths.append(path)
  (folder / INDEX_FILE).write_text(json.dumps(
      {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2) + "\n")
  return paths
