"""Gold trees of the UUAS probe: head-rule dependencies, tree distances, MST, probed sentences.

Gold tree: dependencies from the constituency tree by Collins' (1999) head rules. The SPEC asks for
"the gold tree's unlabeled undirected edges" over *words*, and a constituency tree has no word–word
edges; leaf-to-leaf path length in the constituency tree is a distance but its minimum spanning
tree is not unique (all sisters are at distance 2), so UUAS against it is ill-defined. Head-rule
dependencies are what the probing literature uses for PTB (Hewitt & Manning convert PTB to Stanford
dependencies), give exactly one tree, and make distances and edges consistent by construction: the
gold distance is the path length in that dependency tree and the gold edges are its pairs at
distance 1, which is also the unique MST of the gold distances (a test checks UUAS = 1). Head rules
read POS tags, so trees are read with their preterminals kept (`read_trees`); a word without a tag
(skeletal trees) just never matches a tag in the priority lists.

Punctuation: removed from the tree before head finding (words tagged '' , . : `` -LRB- -RRB-, the
tag set of Hewitt & Manning's evaluation; an untagged word when it is one of the caller's
`punct_words` — the probe CLI passes evalb's punctuation words except # and $), so it is neither
probed nor part of any gold edge or distance, and a constituent left with only punctuation
disappears. The model still reads every word, punctuation included: word vectors come
from the full sentence in context. Sentences with fewer than 2 remaining words have no edge and are
skipped.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Iterable, Sequence

import numpy as np

from slm_jax import ptb
from slm_jax.kinds import PTB_LABELS
from slm_jax.trees import Tree

# Hewitt & Manning's punctuation tags (an untagged word is looked up in the caller's words).
PUNCT_TAGS = frozenset(("''", ",", ".", ":", "``", "-LRB-", "-RRB-"))
_PHRASES = frozenset(PTB_LABELS)
EDGE_DEFINITION = ("dependencies by Collins (1999) head rules over the constituency tree, "
                   "punctuation removed; distance = path length in that tree")


# --- gold dependency trees ----------------------------------------------------------------------

# Collins (1999) head table (as Stanford's CollinsHeadFinder): label -> (direction, priorities).
# For each category in order, scan the children in `direction` ("left" = left to right); the first
# match is the head; when none matches, the first child in that direction.
HEAD_RULES = {
    "ADJP": ("left", "NNS QP NN $ ADVP JJ VBN VBG ADJP JJR NP JJS DT FW RBR RBS SBAR RB"),
    "ADVP": ("right", "RB RBR RBS FW ADVP TO CD JJR JJ IN NP JJS NN"),
    "CONJP": ("right", "CC RB IN"),
    "FRAG": ("right", ""),
    "INTJ": ("left", ""),
    "LST": ("right", "LS :"),
    "NAC": ("left", "NN NNS NNP NNPS NP NAC EX $ CD QP PRP VBG JJ JJS JJR ADJP FW"),
    "PP": ("right", "IN TO VBG VBN RP FW"),
    "PRN": ("left", ""),
    "PRT": ("right", "RP"),
    "QP": ("left", "$ IN NNS NN JJ RB DT CD NCD QP JJR JJS"),
    "RRC": ("right", "VP NP ADVP ADJP PP"),
    "S": ("left", "TO IN VP S SBAR ADJP UCP NP"),
    "SBAR": ("left", "WHNP WHPP WHADVP WHADJP IN DT S SQ SINV SBAR FRAG"),
    "SBARQ": ("left", "SQ S SINV SBARQ FRAG"),
    "SINV": ("left", "VBZ VBD VBP VB MD VP S SINV ADJP NP"),
    "SQ": ("left", "VBZ VBD VBP VB MD VP SQ"),
    "UCP": ("right", ""),
    "VP": ("left", "TO VBD VBN MD VBZ VB VBG VBP VP ADJP NN NNS NP"),
    "WHADJP": ("left", "CC WRB JJ ADJP"),
    "WHADVP": ("right", "CC WRB"),
    "WHNP": ("left", "WDT WP WP$ WHADJP WHPP WHNP"),
    "WHPP": ("right", "IN TO FW"),
    "X": ("right", ""),
}
# Collins' NP rule (also for NX): (categories as a set, direction) tried in turn.
NP_RULES = (("NN NNP NNPS NNS NX POS JJR", "right"), ("NP", "left"), ("$ ADJP PRN", "right"),
            ("CD", "right"), ("JJ JJS RB QP", "right"))


def _order(n: int, direction: str) -> range:
  return range(n) if direction == "left" else range(n - 1, -1, -1)


def head_child(label: str, categories: Sequence[str | None]) -> int:
  """Index of the head among children with these categories (phrase label, POS tag, or None for an
  untagged word) of a `label` node, by Collins' head rules (`HEAD_RULES`, `NP_RULES`)."""
  n = len(categories)
  if label in ("NP", "NX"):
    if categories[-1] == "POS":
      return n - 1
    for members, direction in NP_RULES:
      wanted = set(members.split())
      for k in _order(n, direction):
        if categories[k] in wanted:
          return k
    return n - 1
  direction, priorities = HEAD_RULES.get(label, ("left", ""))
  for category in priorities.split():
    for k in _order(n, direction):
      if categories[k] == category:
        return k
  return _order(n, direction)[0]


def _is_preterminal(node: Tree) -> bool:
  return (len(node.children) == 1 and isinstance(node.children[0], str)
          and node.label not in _PHRASES)


def is_punctuation(word: str, tag: str | None, punct_words: frozenset) -> bool:
  """A tagged word by its tag (`PUNCT_TAGS`), an untagged one by `punct_words`."""
  return tag in PUNCT_TAGS if tag is not None else word in punct_words


def tree_dependencies(tree: Tree, punct_words: frozenset
                      ) -> tuple[list[str], np.ndarray, np.ndarray]:
  """(every leaf word, indices of the non-punctuation words among them [n], head of each of those
  among the n (-1 = the root) [n]) of a constituency tree, by `head_child`, punctuation removed
  first (module docstring; `punct_words`: the untagged punctuation words). A POS preterminal's
  label is its word's tag."""
  words: list[str] = []
  kept: list[int] = []
  heads: list[int] = []

  def visit(node) -> tuple[int | None, str | None]:  # (kept index of the head word, category)
    if isinstance(node, str) or _is_preterminal(node):
      word, tag = (node, None) if isinstance(node, str) else (node.children[0], node.label)
      words.append(word)
      if is_punctuation(word, tag, punct_words):
        return None, None
      kept.append(len(words) - 1)
      heads.append(-1)
      return len(kept) - 1, tag
    found = [visit(child) for child in node.children]
    found = [(h, category) for h, category in found if h is not None]
    if not found:
      return None, None
    head = found[head_child(node.label, [category for _, category in found])][0]
    for h, _ in found:
      if h != head:
        heads[h] = head
    return head, node.label

  visit(tree)
  return words, np.asarray(kept, np.int32), np.asarray(heads, np.int32)


def tree_distances(heads_N: np.ndarray) -> np.ndarray:
  """Path lengths [n, n] (int32) in the tree given by `heads_N` (-1 = root): depth_i + depth_j −
  2·depth(lca), from the ancestor-or-self matrix (common ancestors = depth(lca) + 1)."""
  heads_N = np.asarray(heads_N, np.int64)
  n = len(heads_N)
  if n == 0:
    return np.zeros((0, 0), np.int32)
  if (heads_N == -1).sum() != 1 or ((heads_N < -1) | (heads_N >= n)).any():
    raise ValueError(f"tree_distances: heads {heads_N.tolist()} need exactly one root (-1) and "
                     f"every head in [0, {n})")
  ancestors_NN = np.zeros((n, n), np.int32)
  rows, current = np.arange(n), np.arange(n)
  for _ in range(n):
    live = current >= 0
    if not live.any():
      break
    ancestors_NN[rows[live], current[live]] = 1
    current = np.where(live, heads_N[np.maximum(current, 0)], -1)
  else:
    if (current >= 0).any():
      raise ValueError(f"tree_distances: heads {heads_N.tolist()} contain a cycle")
  depth_N = ancestors_NN.sum(1) - 1
  common_NN = ancestors_NN @ ancestors_NN.T
  return (depth_N[:, None] + depth_N[None, :] - 2 * (common_NN - 1)).astype(np.int32)


def tree_edges(heads_N: np.ndarray) -> set[tuple[int, int]]:
  """The undirected edges (i < j) of the tree `heads_N`."""
  return {(min(i, int(h)), max(i, int(h))) for i, h in enumerate(heads_N) if h >= 0}


def min_spanning_tree(d_NN: np.ndarray) -> set[tuple[int, int]]:
  """Edges (i < j) of the minimum spanning tree of the symmetric distances `d_NN` (Prim, O(n²);
  ties go to the lowest index)."""
  d_NN = np.asarray(d_NN, np.float64)
  n = d_NN.shape[0]
  edges: set[tuple[int, int]] = set()
  if n < 2:
    return edges
  in_tree = np.zeros(n, bool)
  in_tree[0] = True
  best_N, parent_N = d_NN[0].copy(), np.zeros(n, np.int64)
  for _ in range(n - 1):
    j = int(np.argmin(np.where(in_tree, np.inf, best_N)))
    edges.add((min(j, int(parent_N[j])), max(j, int(parent_N[j]))))
    in_tree[j] = True
    closer = d_NN[j] < best_N
    best_N, parent_N = np.where(closer, d_NN[j], best_N), np.where(closer, j, parent_N)
  return edges


@dataclasses.dataclass(frozen=True)
class ProbeSentence:
  """One probed sentence: the model reads `words`; the n non-punctuation words `kept` are probed."""

  words: tuple[str, ...]  # every leaf, the model's input
  kept: np.ndarray        # int32 [n]: indices into words of the probed words
  heads: np.ndarray       # int32 [n]: gold head among the kept (-1 = root)
  distances: np.ndarray   # int32 [n, n]: gold tree distances
  tree: Tree | None = None

  @property
  def n(self) -> int:
    return len(self.kept)


def sentence(tree: Tree, punct_words: frozenset) -> ProbeSentence:
  words, kept, heads = tree_dependencies(tree, punct_words)
  return ProbeSentence(tuple(words), kept, heads, tree_distances(heads), tree)


def sentences_from_trees(trees: Iterable[Tree], punct_words: frozenset,
                         max_words: int | None = None) -> list[ProbeSentence]:
  """The probed sentences of `trees`: those with ≥ 2 non-punctuation words (and at most
  `max_words` words in all, when given)."""
  out = []
  for tree in trees:
    s = sentence(tree, punct_words)
    if s.n >= 2 and (max_words is None or len(s.words) <= max_words):
      out.append(s)
  return out


# Trees keep their POS layer (head rules read tags); the rest of SPEC §1 normalization applies.
TREE_OPTIONS = ptb.NormalizeOptions(drop_preterminals=False)


def read_trees(paths: Iterable[str | pathlib.Path]) -> list[Tree]:
  """Every tree of these PTB files/folders, in file order, POS preterminals kept."""
  return [doc[0] for doc in ptb.read_documents(list(paths), sentences=True,
                                                normalize=TREE_OPTIONS)]
