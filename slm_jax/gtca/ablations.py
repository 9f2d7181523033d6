"""Tree sources for GTCA's parse-quality ablations (SPEC §10): gold, weak, right-branching,
random, permuted.

- `gold`: the tree the example comes with (the toy task's grammar tree).
- `weak` (weak parser): the tree a genuinely weaker trained parser gives the same words
  (`weak_trees`: a parser folder, e.g. the GUM parser trained on 10% of GUM's training
  documents for one epoch, docs/GTCA_TOY.md says which and its F1).
- `right_branching`: `(X w0 (X w1 (X w2 …)))` over the same words — the classic structure-free
  baseline of English; it knows nothing but word order (its own row, not the weak parser).
- `random` (random trees): a random binary bracketing of the same words in their order, each
  node split at a uniformly drawn point (`random_bracketing`).
- `permuted` (permuted trees): the gold topology with the words shuffled among its leaves
  (`permute_leaves`). A shuffled word order is no longer the text's order, so this is done on
  the span tree (token ranges): the question's leaf ranges are permuted and every internal node
  becomes the hull [min start, max end) of its leaves, as a span tree node always is. The
  OPTIONS and ANSWER subtrees are left as they are (they are not parser output).

Every source is deterministic given its `numpy.random.Generator`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from slm_jax.gtca.spans import ANSWER, OPTIONS, SpanNode, SpanTree
from slm_jax.trees import Tree

TREE_SOURCES = ("gold", "weak", "right_branching", "random", "permuted")
LABEL = "X"


def right_branching(words: Sequence[str], label: str = LABEL) -> Tree:
  """`(X w0 (X w1 … (X w_{n-2} w_{n-1})))`; one word → `(X w0)`."""
  if not words:
    raise ValueError("right_branching: no words")
  tree = Tree(label, tuple(words[-2:]))
  for word in reversed(words[:-2]):
    tree = Tree(label, (word, tree))
  return tree


def random_bracketing(words: Sequence[str], rng: np.random.Generator,
                      label: str = LABEL) -> Tree:
  """A random binary tree over `words` in order: a span of n ≥ 2 words splits after a uniformly
  drawn 1 … n−1 words (iterative, so long sentences do not hit the recursion limit)."""
  if not words:
    raise ValueError("random_bracketing: no words")
  words = list(words)
  if len(words) == 1:
    return Tree(label, (words[0],))
  # Draw every split top-down (pre-order), then build bottom-up.
  splits: dict[tuple[int, int], int] = {}
  stack = [(0, len(words))]
  while stack:
    lo, hi = stack.pop()
    if hi - lo < 2:
      continue
    mid = lo + int(rng.integers(1, hi - lo))
    splits[(lo, hi)] = mid
    stack.extend([(mid, hi), (lo, mid)])
  built: dict[tuple[int, int], Tree | str] = {}
  for (lo, hi) in sorted(splits, key=lambda s: s[1] - s[0]):
    mid = splits[(lo, hi)]
    kids = [built.get((lo, mid), words[lo]), built.get((mid, hi), words[mid])]
    built[(lo, hi)] = Tree(label, tuple(kids))
  return built[(0, len(words))]


def _leaves(node: SpanNode) -> list[SpanNode]:
  out, stack = [], [node]
  while stack:
    n = stack.pop()
    if n.children:
      stack.extend(reversed(n.children))
    else:
      out.append(n)
  return out


def _relabel(node: SpanNode, ranges: dict[int, tuple[int, int]]) -> SpanNode:
  """`node` with leaf ranges from `ranges` (keyed by id of the old leaf), hulls above."""
  if not node.children:
    start, end = ranges[id(node)]
    return SpanNode(node.label, start, end)
  kids = tuple(_relabel(c, ranges) for c in node.children)
  return SpanNode(node.label, min(k.start for k in kids), max(k.end for k in kids), kids)


def permute_leaves(tree: SpanTree, rng: np.random.Generator) -> SpanTree:
  """The same topology with the question's leaf token ranges shuffled (module docstring)."""
  if tree.root is None:
    return tree
  parsed = [c for c in tree.root.children if c.label not in (OPTIONS, ANSWER)]
  leaves = [leaf for child in parsed for leaf in _leaves(child)]
  order = rng.permutation(len(leaves))
  ranges = {id(leaf): (leaves[j].start, leaves[j].end) for leaf, j in zip(leaves, order)}
  kids = tuple(_relabel(c, ranges) if c.label not in (OPTIONS, ANSWER) else c
               for c in tree.root.children)
  root = SpanNode(tree.root.label, min(k.start for k in kids), max(k.end for k in kids), kids)
  return SpanTree(root, tree.n_tokens, tree.masked)


def weak_trees(sentences: Sequence[Sequence[str]], folder: str) -> list[Tree]:
  """The weak parser's trees (parser folder `folder`) over each word list, in one batch."""
  if not folder:
    raise ValueError("the weak-parser ablation needs a parser folder (weak_parser=FOLDER: a "
                     "genuinely weaker trained parser, docs/GTCA_TOY.md)")
  from slm_jax.parser import api  # pylint: disable=import-outside-toplevel  (JAX: only to parse)
  return api.load_parser(folder).parse([list(words) for words in sentences])


def question_tree(gold: Tree, source: str, rng: np.random.Generator,
                  weak: Tree | None = None) -> Tree:
  """The word tree of the question under `source` (`permuted` returns the gold tree: the
  shuffle is applied to its span tree, `permute_leaves`; `weak` returns `weak`, the weak
  parser's tree over the same words, `weak_trees`)."""
  if source in ("gold", "permuted"):
    return gold
  if source == "weak":
    if weak is None or weak.leaves() != gold.leaves():
      raise ValueError("tree source 'weak' needs the weak parser's tree over the same words")
    return weak
  if source == "right_branching":
    return right_branching(gold.leaves())
  if source == "random":
    return random_bracketing(gold.leaves(), rng)
  raise ValueError(f"unknown tree source {source!r}; expected one of {', '.join(TREE_SOURCES)}")
