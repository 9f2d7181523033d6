"""Span labels of the chart parser: the label vocabulary, binarization and debinarization.

A normalized tree (SPEC §1: no POS, no wrapper) is a set of labelled spans over fenceposts
0..n. A unary chain — nodes with the same span, `(S (VP …))` — is one span with the chain label
`S+VP` (top first). The vocabulary is ∅ (index 0, `EMPTY`: no constituent), the 26 PTB labels,
then the chain labels seen in the training trees, in order of first appearance.

Binarization (`binarize`) turns a tree into the 2n − 1 spans of a binary bracketing: the n words
(length-1 spans; ∅ unless a one-word constituent sits on the word), the tree's constituents, and
∅-labelled intermediate spans that split every constituent with k > 2 children: right-binarized
`(A c1 c2 c3)` → `A[c1 ∅[c2 c3]]`, left-binarized → `A[∅[c1 c2] c3]`. `debinarize` is the inverse
for any nested labelled span set: it drops ∅ spans and expands chain labels, so every binarization
of a tree debinarizes to that tree. `labelled_spans` / `spans_key` give the non-∅ spans of a tree
or a binary tree, the identity used to deduplicate proposals.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Iterable, Sequence

import numpy as np

from slm_jax.kinds import PTB_LABELS
from slm_jax.trees import Tree

EMPTY = "∅"
CHAIN_SEPARATOR = "+"


@dataclasses.dataclass(frozen=True)
class LabelVocab:
  """Index 0 = ∅, then the 26 PTB labels, then chain labels (`S+VP`)."""

  labels: tuple[str, ...]

  def __post_init__(self):
    if not self.labels or self.labels[0] != EMPTY:
      raise ValueError(f"a label vocabulary starts with {EMPTY!r}")
    object.__setattr__(self, "_index", {label: k for k, label in enumerate(self.labels)})

  def __len__(self) -> int:
    return len(self.labels)

  @classmethod
  def from_trees(cls, trees: Iterable[Tree]) -> LabelVocab:
    labels = [EMPTY, *PTB_LABELS]
    seen = set(labels)
    for tree in trees:
      for _, _, label in labelled_spans(tree):
        if label not in seen:
          seen.add(label)
          labels.append(label)
    return cls(tuple(labels))

  def index(self, label: str) -> int:
    """The id of `label`; an unseen chain falls back to its top label (never raises for chains of
    PTB labels); KeyError for anything else."""
    hit = self._index.get(label)
    if hit is not None:
      return hit
    top = label.split(CHAIN_SEPARATOR, 1)[0]
    if CHAIN_SEPARATOR in label and top in self._index:
      return self._index[top]
    raise KeyError(f"label {label!r} is not in the parser's label vocabulary")

  def to_json(self) -> list[str]:
    return list(self.labels)

  @classmethod
  def from_json(cls, labels: Sequence[str]) -> LabelVocab:
    return cls(tuple(labels))


def labelled_spans(tree: Tree) -> list[tuple[int, int, str]]:
  """(i, j, label) of every constituent, chains collapsed to one `A+B` label, pre-order."""
  out: list[tuple[int, int, str]] = []
  for i, j, chain, _ in _chains(tree):
    out.append((i, j, CHAIN_SEPARATOR.join(chain)))
  return out


def _chains(tree: Tree):
  """(i, j, chain labels, children of the chain's bottom node) per chain, pre-order."""
  out = []
  stack: list[tuple[Tree, int]] = [(tree, 0)]
  sizes: dict[int, int] = {}
  while stack:
    node, start = stack.pop()
    chain = [node.label]
    while len(node.children) == 1 and isinstance(node.children[0], Tree):
      node = node.children[0]
      chain.append(node.label)
    width = _size(node, sizes)
    out.append((start, start + width, chain, node.children))
    position = start
    pushed = []
    for child in node.children:
      if isinstance(child, str):
        position += 1
      else:
        pushed.append((child, position))
        position += _size(child, sizes)
    stack.extend(reversed(pushed))
  return out


def _size(node: Tree, cache: dict[int, int]) -> int:
  key = id(node)
  hit = cache.get(key)
  if hit is None:
    hit = len(node.leaves())
    cache[key] = hit
  return hit


def binarize(tree: Tree, vocab: LabelVocab, direction: str = "right") -> np.ndarray:
  """The 2n − 1 spans of the tree's binarization as int32 rows (i, j, label id), sorted."""
  if direction not in ("right", "left"):
    raise ValueError(f"direction must be 'right' or 'left', got {direction!r}")
  rows: dict[tuple[int, int], int] = {}
  for i, j, chain, children in _chains(tree):
    rows[(i, j)] = vocab.index(CHAIN_SEPARATOR.join(chain))
    if j - i == 1:
      continue
    starts, position, sizes = [], i, {}
    for child in children:
      starts.append(position)
      width = 1 if isinstance(child, str) else _size(child, sizes)
      if width == 1:
        rows.setdefault((position, position + 1), 0)
      position += width
    ends = starts[1:] + [j]
    if direction == "right":
      for start in starts[1:-1]:
        rows[(start, j)] = 0
    else:
      for end in ends[1:-1]:
        rows[(i, end)] = 0
  out = np.array([(i, j, label) for (i, j), label in sorted(rows.items())], np.int32)
  return out.reshape(-1, 3)


def debinarize(words: Sequence[str], spans: np.ndarray, vocab: LabelVocab) -> Tree:
  """The n-ary tree of a nested labelled span set (rows (i, j, label id)): ∅ spans dropped, chain
  labels expanded. Raises ValueError when no labelled span covers all the words or spans cross."""
  n = len(words)
  kept = [(int(i), int(j), int(label)) for i, j, label in np.asarray(spans).reshape(-1, 3)
          if label != 0]
  kept.sort(key=lambda row: (row[0], -row[1]))
  if not kept or kept[0][:2] != (0, n):
    raise ValueError(f"no labelled span covers all {n} words")
  # Stack of open nodes: (end, label chain, children); words are added as the cursor passes them.
  stack: list[tuple[int, str, list]] = []
  cursor = 0

  def close_until(position: int) -> None:
    nonlocal cursor
    while stack and stack[-1][0] <= position:
      end, label, children = stack[-1]
      children.extend(words[cursor:end])
      cursor = max(cursor, end)
      stack.pop()
      node = _chain_node(label, children)
      (stack[-1][2] if stack else result).append(node)

  result: list[Tree] = []
  for i, j, label in kept:
    close_until(i)
    if stack and j > stack[-1][0]:
      raise ValueError(f"span ({i}, {j}) crosses span ending at {stack[-1][0]}")
    if stack:
      stack[-1][2].extend(words[cursor:i])
    cursor = max(cursor, i)
    stack.append((j, vocab.labels[label], []))
  close_until(n)
  return result[0]


def _chain_node(label: str, children: list) -> Tree:
  chain = label.split(CHAIN_SEPARATOR)
  node = Tree(chain[-1], tuple(children))
  for top in reversed(chain[:-1]):
    node = Tree(top, (node,))
  return node


def spans_key(spans: np.ndarray) -> tuple[tuple[int, int, int], ...]:
  """The identity of a binary tree's debinarization: its non-∅ (i, j, label) rows, sorted."""
  rows = np.asarray(spans).reshape(-1, 3)
  rows = rows[rows[:, 2] != 0]
  order = np.lexsort((rows[:, 1], rows[:, 0]))
  return tuple(map(tuple, rows[order].tolist()))


def tree_label_ids(tree: Tree, vocab: LabelVocab) -> np.ndarray:
  """Rows (i, j, label id) of the tree's constituents (chains collapsed): its non-∅ spans."""
  rows = [(i, j, vocab.index(label)) for i, j, label in labelled_spans(tree)]
  return np.array(rows, np.int32).reshape(-1, 3)


def chain_counts(trees: Iterable[Tree]) -> collections.Counter:
  """How often each chain label occurs (for the training summary)."""
  return collections.Counter(label for tree in trees for _, _, label in labelled_spans(tree)
                             if CHAIN_SEPARATOR in label)

