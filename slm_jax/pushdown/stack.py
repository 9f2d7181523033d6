"""The Pushdown stack token by token: the state a search hypothesis carries, and the loop oracle.

`Stack` holds the elements of one incremental parse as (first token, last token) pairs, the
current depth of every token and, for every token reduced past, its constituent (span_start /
span_end, as in `structure.PushdownRows`). `push(e, attach)` applies token e's attachment:
`attach == e` shifts; otherwise the elements above and including the one whose last token is
`attach` are reduced with e, innermost first, each reduce adding one to the depth of the tokens it
covers (the paper's stack tape with depth). `options()` are the elements the next word may reduce
with: those of the current sentence (`sentence_start`).

`oracle_document(trees)` is the reference the vectorized `structure` code is tested against: it
right-binarizes and unary-collapses every tree by recursion, runs the shift-reduce actions of its
post-order walk over `<s> words … </s>`, and records each token's attachment and the stack tape
row after it — no span arithmetic, a stack of token lists as in the paper's code.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from slm_jax.trees import Tree


class Stack:
  """One incremental parse over at most `length` tokens (a hypothesis of the search)."""

  def __init__(self, length: int):
    self.length = length
    self.elements: list[tuple[int, int]] = []
    self.depth = np.zeros(length, np.int32)
    self.span_start = np.full(length, length, np.int32)
    self.span_end = np.full(length, length, np.int32)
    self.sentence_start = 0
    self.size = 0

  def copy(self) -> "Stack":
    other = Stack.__new__(Stack)
    other.length, other.elements = self.length, list(self.elements)
    other.depth, other.span_start = self.depth.copy(), self.span_start.copy()
    other.span_end, other.sentence_start, other.size = (self.span_end.copy(),
                                                        self.sentence_start, self.size)
    return other

  def start_sentence(self) -> None:
    """The next token opens a sentence: earlier elements are closed to its words."""
    self.sentence_start = self.size

  def options(self) -> list[int]:
    """Last tokens of the elements the next word may reduce with (never BOS: sentence tokens
    only), innermost first; the shift is always possible besides."""
    return [last for first, last in reversed(self.elements) if first >= self.sentence_start]

  def push(self, e: int, attach: int) -> None:
    if e != self.size or e >= self.length:
      raise ValueError(f"token {e}: pushed out of order (the stack holds {self.size} tokens of "
                       f"{self.length})")
    self.size += 1
    if attach == e:
      self.elements.append((e, e))
      return
    if attach not in self.options():
      raise ValueError(f"token {e}: attachment {attach} is not an element it may reduce with "
                       f"(options {self.options()} or {e} to shift)")
    first = e
    while True:
      start, last = self.elements.pop()
      self.span_start[last], self.span_end[last] = start, e
      self.depth[start:e + 1] += 1
      first = start
      if last == attach:
        break
    self.elements.append((first, e))


def _binarize(node):
  """Right-binarized, unary-collapsed nested pairs of leaf indices (a leaf: an int)."""
  if isinstance(node, int):
    return node
  children = [_binarize(c) for c in node]
  if len(children) == 1:
    return children[0]
  out = children[-1]
  for child in reversed(children[:-1]):
    out = (child, out)
  return out


def _numbered(tree: Tree, counter: list[int]):
  children = []
  for child in tree.children:
    if isinstance(child, str):
      children.append(counter[0])
      counter[0] += 1
    else:
      children.append(_numbered(child, counter))
  return children


def _actions(node, out: list) -> None:
  """Post-order shift-reduce actions: ("shift", token) or ("reduce",)."""
  if isinstance(node, int):
    out.append(("shift", node))
    return
  _actions(node[0], out)
  _actions(node[1], out)
  out.append(("reduce",))


def oracle_document(trees: Sequence[Tree]) -> tuple[np.ndarray, np.ndarray]:
  """(attach [n], tape [n, n]) of `<s> words … </s>` (n = words + 2), by the loop walk."""
  n = sum(len(t.leaves()) for t in trees) + 2
  actions: list = [("shift", 0)]
  counter = [1]
  for tree in trees:
    _actions(_binarize(_numbered(tree, counter)), actions)
  actions.append(("shift", n - 1))
  attach = np.arange(n)
  tape = np.zeros((n, n), np.int32)
  depth = np.zeros(n, np.int32)
  stack: list[list[int]] = []
  current = None
  for k, action in enumerate(actions):
    if action[0] == "shift":
      current = action[1]
      stack.append([current])
    else:
      right, left = stack.pop(), stack.pop()
      for token in left + right:
        depth[token] += 1
      attach[current] = left[-1]
      stack.append(left + right)
    if k + 1 == len(actions) or actions[k + 1][0] == "shift":
      tape[current] = depth
  return attach, tape
