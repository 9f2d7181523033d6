"""Treebanks for the parser: PTB files/folders, and GUM's official train/dev/test split.

`gum_split_files(split)` reads `gum/splits.md` from the shared data folder (`cli.shared_data_dir`)
and returns `gum/const/<name>.ptb` for every document listed under `## <split>`; documents whose
file is absent (GUM's Reddit documents ship without text) are returned separately so callers can
count them.
"""

from __future__ import annotations

import pathlib
import re
from typing import Sequence

from slm_jax import cli, ptb
from slm_jax.trees import Tree

GUM_SPLITS = ("train", "dev", "test", "test2")
_HEADING = re.compile(r"^##\s+(\S+)\s*$", re.M)
_ITEM = re.compile(r"^\s*\*\s+(\S+)\s*$", re.M)


def gum_split_names(splits_md: str) -> dict[str, list[str]]:
  """{split: document names} from the text of GUM's splits.md."""
  parts = _HEADING.split(splits_md)
  return {parts[k]: _ITEM.findall(parts[k + 1]) for k in range(1, len(parts), 2)}


def gum_split_files(split: str, root: str | pathlib.Path | None = None
                    ) -> tuple[list[pathlib.Path], list[str]]:
  """(existing `.ptb` files, names whose file is missing) of one GUM split."""
  if split not in GUM_SPLITS:
    raise ValueError(f"unknown GUM split {split!r}; choose from {', '.join(GUM_SPLITS)}")
  gum = pathlib.Path(root) if root is not None else cli.shared_data("gum", "--gum")
  splits_md = gum / "splits.md"
  if not splits_md.is_file():
    raise FileNotFoundError(f"{splits_md}: GUM's split list is missing")
  names = gum_split_names(splits_md.read_text(encoding="utf-8")).get(split)
  if not names:
    raise ValueError(f"{splits_md}: no documents listed under '## {split}'")
  files = [gum / "const" / f"{name}.ptb" for name in names]
  return [f for f in files if f.is_file()], [n for n, f in zip(names, files) if not f.is_file()]


def read_sentences(paths: Sequence[str | pathlib.Path],
                   report: ptb.ReadReport | None = None) -> list[Tree]:
  """Every sentence tree (SPEC §1 normalized) of the given files and folders, in order."""
  documents = ptb.read_documents([str(p) for p in paths], sentences=True, report=report)
  return [tree for document in documents for tree in document]


def resolve(spec: str | None, split: str, gum: str | None) -> tuple[list[Tree], str, list[str]]:
  """Trees of a `--train`/`--dev`/`--test` flag (comma-separated files/folders), or of the GUM
  split when the flag is empty; also a description and the missing GUM documents."""
  report = ptb.ReadReport()
  if spec:
    paths = [p for p in spec.split(",") if p]
    return read_sentences(paths, report), ",".join(paths), []
  files, missing = gum_split_files(split, gum)
  return read_sentences(files, report), f"GUM {split} ({len(files)} documents)", missing
