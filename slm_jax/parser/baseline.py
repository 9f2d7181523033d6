"""The right-branching baseline: `(S w1 (VP w2 (VP … (VP wn−1 wn))))`.

Every span (i, n), i < n − 1, is a constituent: the root is labelled `root` and the others
`inner` (S / VP: the labelled baseline; `evalb.score_trees(..., labeled=False)` scores the
unlabelled bracketing). A one-word sentence is `(root w1)`.
"""

from __future__ import annotations

from typing import Sequence

from slm_jax.trees import Tree


def right_branching(words: Sequence[str], root: str = "S", inner: str = "VP") -> Tree:
  if not words:
    raise ValueError("an empty sentence has no tree")
  node: Tree | str = Tree(inner, tuple(words[-2:])) if len(words) > 1 else words[-1]
  for word in reversed(words[1:-2]):
    node = Tree(inner, (word, node))
  if len(words) == 1:
    return Tree(root, (words[0],))
  if len(words) == 2:
    return Tree(root, tuple(words))
  return Tree(root, (words[0], node))
