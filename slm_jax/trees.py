"""The constituency tree type shared by the reader, the linearizers, the grammar and the tokenizer.

A `Tree` is an immutable labeled node whose children are `Tree`s or words (`str`). After the default
normalization (SPEC §1, `slm_jax.ptb`) trees have no POS preterminals: words hang directly under
phrase nodes, e.g. `Tree("S", ("Cats", Tree("VP", ("chase", "mice"))))`.
"""

from __future__ import annotations

import dataclasses
from typing import Iterator, Sequence, Union

Child = Union["Tree", str]


@dataclasses.dataclass(frozen=True, slots=True)
class Tree:
  label: str
  children: tuple[Child, ...]

  def __post_init__(self):
    if not isinstance(self.children, tuple):
      object.__setattr__(self, "children", tuple(self.children))

  def leaves(self) -> list[str]:
    """The words of the tree, left to right."""
    out: list[str] = []
    stack: list[Child] = [self]
    while stack:
      node = stack.pop()
      if isinstance(node, str):
        out.append(node)
      else:
        stack.extend(reversed(node.children))
    return out

  def subtrees(self) -> Iterator["Tree"]:
    """All nodes, pre-order."""
    stack: list[Tree] = [self]
    while stack:
      node = stack.pop()
      yield node
      stack.extend(c for c in reversed(node.children) if isinstance(c, Tree))

  def to_bracketed(self) -> str:
    """One-line PTB bracketing, e.g. `(S Cats (VP chase mice))`."""
    parts = []
    for child in self.children:
      parts.append(child if isinstance(child, str) else child.to_bracketed())
    return "(" + " ".join([self.label, *parts]) + ")"

  def __str__(self) -> str:
    return self.to_bracketed()


# A document is an ordered list of sentence trees (SPEC §1).
Document = Sequence[Tree]
