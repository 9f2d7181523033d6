"""OpenBookQA's grafted lines (qlwpc/TG-Interpolation `datatools/obqa_tree_clean.py` @ 8e909852).

Each option's line is the parse of `stem + " " + option + "."`, one or more sentence trees. The
paper code rebuilds every line from the gold line so that all of them share its prefix:

  locate (`find_choice_in_line`)   the option is matched in the line's LAST tree
          (`match_choice_in_leaves`: backwards from the end without the trailing punctuation
          leaves, spaces removed, trailing punctuation ignored, then case-insensitively); found
          there, its node is the exact-span node nearest the root, else the tightest containing
          node (single-tree mode). Not found there and the line has several trees, it is matched
          over all of them (multi-tree mode): the tree `t` where it starts and its first leaf
          `s` in `t`; for s > 0 its node in `t` is the node of the span from `s` to the end of
          `t`'s content (the same exact / containing rule); for s = 0 there is no node (the
          option begins tree `t`).
  graft   (`normalize_sample`, `_graft`) line k of the output =
          the gold line's trees before its tree `t`
          + the middle: both nodes → the gold's tree `t` with the gold node replaced by option
            k's node; a gold node only → the gold's tree `t` as it is; option k's node only →
            that node as a tree of its own; neither → nothing
          + option k's trees after its tree `t` (from `t` itself when it has no node).
          A line keeps its own parse only where the code keeps it: the gold option is not found
          (then every line), or the line's own option is not found (`not_grafted`).

Trees here have no POS preterminals (SPEC §1): a word hanging under a phrase node stands for the
code's preterminal, so a word is a node of its own in both rules (a single-word option under a
larger phrase grafts the word, as the code grafts its preterminal). A word grafted as a tree of
its own (the code writes `(NN word)`, a bare terminal in its bracket string) cannot be a
sentence here: it is wrapped in its parent's label and counted (`bare_word`). Every line rebuilt
from a multi-tree location is counted (`multi_tree`).
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from typing import Sequence

from slm_jax.trees import Tree

PTB_BRACKETS = {"-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}"}
PUNCT_CHARS = ".!?,;:"
Path = tuple[int, ...]


def content_end(leaves: Sequence[str]) -> int:
  """The leaves before the trailing pure-punctuation leaves ("H2O." is not pure punctuation)."""
  end = len(leaves)
  while end and leaves[end - 1] and all(c in PUNCT_CHARS for c in leaves[end - 1]):
    end -= 1
  return end


def match_choice(leaves: Sequence[str], choice: str) -> tuple[int, int] | None:
  """(start, content end) of `choice` in `leaves`: searched backwards from the content end,
  spaces removed, PTB brackets undone, trailing punctuation ignored, then case-insensitively."""
  end = content_end(leaves)
  want = choice.replace(" ", "")
  for fold in (str, str.lower):
    for start in range(end - 1, -1, -1):
      got = "".join(PTB_BRACKETS.get(w, w) for w in leaves[start:end])
      if fold(got) == fold(want) or fold(got.rstrip(PUNCT_CHARS)) == fold(want.rstrip(PUNCT_CHARS)):
        return start, end
  return None


def spans(tree: Tree) -> dict[Path, tuple[int, int]]:
  """{position: (first leaf, end leaf)} of every node, words included, children before parents."""
  out: dict[Path, tuple[int, int]] = {}

  def walk(node: Tree, path: Path, offset: int) -> int:
    start = offset
    for i, child in enumerate(node.children):
      if isinstance(child, str):
        out[path + (i,)] = (offset, offset + 1)
        offset += 1
      else:
        offset = walk(child, path + (i,), offset)
    out[path] = (start, offset)
    return offset

  walk(tree, (), 0)
  return out


def node_of(tree: Tree, start: int) -> Path:
  """The node of the span from leaf `start` to the end of `tree`'s content: the exact-span node
  nearest the root, else the tightest containing node (ties: the shallower, then the first)."""
  end = content_end(tree.leaves())
  where = spans(tree)
  exact = [p for p, s in where.items() if s == (start, end)]
  if exact:
    return min(exact, key=len)
  containing = [(p, s) for p, s in where.items() if s[0] <= start and s[1] >= end]
  return min(containing, key=lambda x: (x[1][1] - x[1][0], len(x[0])))[0]


@dataclasses.dataclass(frozen=True)
class Located:
  """Where a line's option is: tree `tree` of the line, its `node` there (None: the option begins
  that tree, multi-tree mode), and whether it was found in the last tree alone."""

  tree: int
  node: Path | None
  single: bool


def locate(trees: Sequence[Tree], choice: str) -> Located | None:
  """The option's place in a line (module docstring), None when it is not there."""
  last = trees[-1]
  found = match_choice(last.leaves(), choice)
  if found is not None:
    return Located(len(trees) - 1, node_of(last, found[0]), True)
  if len(trees) < 2:
    return None
  leaves = [t.leaves() for t in trees]
  found = match_choice(list(itertools.chain.from_iterable(leaves)), choice)
  if found is None:
    return None
  starts = list(itertools.accumulate((len(x) for x in leaves[:-1]), initial=0))
  t = bisect.bisect_right(starts, found[0]) - 1  # the last tree starting at or before it
  local = found[0] - starts[t]
  return Located(t, node_of(trees[t], local) if local else None, False)


def at(tree: Tree, path: Path) -> Tree | str:
  for i in path:
    tree = tree.children[i]
  return tree


def put(tree: Tree, path: Path, new: Tree | str) -> Tree | str:
  """`tree` with the node at `path` replaced by `new`."""
  if not path:
    return new
  children = list(tree.children)
  children[path[0]] = put(children[path[0]], path[1:], new)
  return Tree(tree.label, tuple(children))


def _sentence(node: Tree | str, line: Tree, path: Path) -> tuple[Tree, tuple[str, ...]]:
  """`node` as a sentence tree: a word is wrapped in its parent's label (counted)."""
  if isinstance(node, Tree):
    return node, ()
  return Tree(at(line, path[:-1]).label, (node,)), ("bare_word",)


def graft_line(gold_line: Sequence[Tree], gold: Located, line: Sequence[Tree], own: Located
               ) -> tuple[list[Tree], tuple[str, ...]]:
  """One option's line rebuilt on the gold line (`_graft`), and what was counted."""
  events = () if gold.single and own.single else ("multi_tree",)
  middle: list[Tree] = []
  if gold.node is not None:
    new = gold_line[gold.tree]
    if own.node is not None:
      new = put(new, gold.node, at(line[own.tree], own.node))
    if isinstance(new, str):  # the gold node was the whole tree and the option's is a word
      new, counted = _sentence(new, line[own.tree], own.node)
      events += counted
    middle = [new]
  elif own.node is not None:
    new, counted = _sentence(at(line[own.tree], own.node), line[own.tree], own.node)
    middle, events = [new], events + counted
  tail = line[own.tree + 1:] if own.node is not None else line[own.tree:]
  return list(gold_line[:gold.tree]) + middle + list(tail), events


def graft(lines: Sequence[Sequence[Tree]], options: Sequence[str], gold: int
          ) -> tuple[list[list[Tree]], list[tuple[str, ...]]]:
  """Every line rebuilt on the gold line (`normalize_sample`), with each line's counted events
  (`not_grafted`, `multi_tree`, `bare_word`)."""
  gold_at = locate(lines[gold], options[gold])
  if gold_at is None:
    return [list(line) for line in lines], [("not_grafted",)] * len(lines)
  out, events = [], []
  for line, option in zip(lines, options):
    own = locate(line, option)
    if own is None:
      out.append(list(line))
      events.append(("not_grafted",))
      continue
    new, counted = graft_line(lines[gold], gold_at, line, own)
    out.append(new)
    events.append(counted)
  return out, events


__all__ = ["Located", "PTB_BRACKETS", "content_end", "graft", "graft_line", "locate",
           "match_choice", "node_of", "spans"]
