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


def pos_tags(raw: Tree) -> list[str]:
  """The POS tags of a raw (unnormalized) tree, one per word that normalization keeps (empty
  elements, `-NONE-`, are skipped as the normalizer drops them); "" for a word whose node is not
  a POS preterminal (`ptb.is_pos_label`), e.g. a skeletal tree's `(NP cats)` or `(NP the dog)`."""
  tags: list[str] = []
  stack: list = [raw]
  while stack:
    node = stack.pop()
    if isinstance(node, str):
      tags.append("")
    elif node.label == "-NONE-":
      continue
    elif (len(node.children) == 1 and isinstance(node.children[0], str)
          and ptb.is_pos_label(node.label)):
      tags.append(ptb.strip_function_tags(node.label))
    else:
      stack.extend(reversed(node.children))
  return tags


def read_tagged_sentences(paths: Sequence[str | pathlib.Path],
                          report: ptb.ReadReport | None = None
                          ) -> tuple[list[Tree], list[list[str] | None]]:
  """`read_sentences` plus each sentence's POS tags from its raw tree; None where some kept word
  has no POS preterminal (no POS layer) or the tags do not line up with the normalized words."""
  documents = ptb.read_documents([str(p) for p in paths], sentences=True, normalize=None,
                                 report=report)
  trees, tags = [], []
  for document in documents:
    for raw in document:
      tree = ptb.normalize_tree(raw, ptb.NormalizeOptions(), report)
      if tree is None:
        continue
      tagged = pos_tags(raw)
      trees.append(tree)
      tags.append(tagged if all(tagged) and len(tagged) == len(tree.leaves()) else None)
  return trees, tags


def _split_paths(spec: str | None, split: str, gum: str | None
                 ) -> tuple[list[str | pathlib.Path], str, list[str]]:
  if spec:
    paths = [p for p in spec.split(",") if p]
    return paths, ",".join(paths), []
  files, missing = gum_split_files(split, gum)
  return files, f"GUM {split} ({len(files)} documents)", missing


def resolve(spec: str | None, split: str, gum: str | None) -> tuple[list[Tree], str, list[str]]:
  """Trees of a `--train`/`--dev`/`--test` flag (comma-separated files/folders), or of the GUM
  split when the flag is empty; also a description and the missing GUM documents."""
  paths, name, missing = _split_paths(spec, split, gum)
  return read_sentences(paths, ptb.ReadReport()), name, missing


def resolve_tagged(spec: str | None, split: str, gum: str | None
                   ) -> tuple[list[Tree], list[list[str] | None], str, list[str]]:
  """`resolve` with each tree's POS tags (`read_tagged_sentences`)."""
  paths, name, missing = _split_paths(spec, split, gum)
  trees, tags = read_tagged_sentences(paths, ptb.ReadReport())
  return trees, tags, name, missing
