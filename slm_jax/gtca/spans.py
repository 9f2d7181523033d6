"""Parser words → sub-word token ranges, the input's span tree, and the per-layer chunk layout that
the GTCA branch reads (SPEC §10).

**Alignment.** The leaves of the parse trees (PTB words, escaped: `-LRB-`, `` `` ``) are found in
the prompt's parse fields left to right (a leaf matches its own spelling, its unescaped surface
form, or for quotes any quote character); each word takes the tokens whose character range
overlaps it (`prompts.overlapping`). A node covers the contiguous token range from its first to its
last token, [start, end). Words left with no token (truncated away) and nodes left with no word
are dropped. A tree whose leaves are not found in order, or that leaves non-space characters of a
parse field uncovered, is a `SpanError` naming the example.

**The input's tree.** MCQA: ROOT → [the trees of the context and question fields, OPTIONS → one leaf
per option line (labelled by its letter), ANSWER (`Answer:` … the end)]. BLiMP / CoLA: ROOT → the
sentence tree(s) (CoLA's judgment prompt: and its ANSWER leaf). Every parser word is a leaf node of its own (a word split into several tokens
is the paper's "subword block as a subnode"). `SpanTree` also carries the token ranges where
m_t = 0, so a cached value alone gives the branch everything; it round-trips through JSON (the
parse cache's value): `{"v": 1, "n": tokens, "masked": [[s, e], …], "nodes": [[label, s, e,
children], …]}` with nodes in pre-order.

**Heights → layers.** depth(root) = 0, H = the maximum depth, height(node) = H − depth(node). Nodes
are walked breadth-first, children left to right, and at most k = 64 are kept per height (the rest
counted as cut). Layer ℓ (0-based) reads height min(ℓ, H): a tree shallower than the model reuses
its top level (the root) in every higher layer; in a tree deeper than the model, heights ≥
n_layers are read by no layer (counted as unread) — they are *not* folded into the last layer.

**`ChunkBatch`** (what `slm_jax.gtca.branch` consumes), for B examples, L = n_layers, K = k:
  start_BLK  int32 (B, L, K)  first token of chunk slot k in layer ℓ (0 for a padding slot)
  end_BLK    int32 (B, L, K)  one past its last token (0 for a padding slot; end > start ⇔ real)
  last_BLK   int32 (B, L, K)  r_n = end − 1 for a real chunk, −1 for padding (token t sees chunk
                              n iff 0 ≤ r_n ≤ t)
  update_mask_BT float32 (B, T)  m_t: 0 on the option lines and `Options:` header, 1 elsewhere —
                              also 1 on positions past the example's tokens (completion, padding)
Real chunks fill the slots 0 … n−1 of a layer in breadth-first order; padding follows.
"""

from __future__ import annotations

import collections
import dataclasses
import json
from typing import Iterable, NamedTuple, Sequence

import numpy as np

from slm_jax.gtca.prompts import MCQA, Prompt
from slm_jax.tokenizer_bases import ptb_unescape
from slm_jax.trees import Tree

K = 64  # chunks kept per height
FORMAT_VERSION = 1
ROOT, OPTIONS, ANSWER = "ROOT", "OPTIONS", "ANSWER"
_QUOTES = ('"', "``", "''", "\u201c", "\u201d", "\u201e", "\u00ab", "\u00bb", "'", "`")
_INWORD = (("-LRB-", "("), ("-RRB-", ")"), ("-LSB-", "["), ("-RSB-", "]"), ("-LCB-", "{"),
           ("-RCB-", "}"))


class SpanError(ValueError):
  """A tree that cannot be placed on the prompt's tokens (names the example and the word)."""


@dataclasses.dataclass(frozen=True)
class SpanNode:
  """A node over the token range [start, end)."""

  label: str
  start: int
  end: int
  children: tuple["SpanNode", ...] = ()


@dataclasses.dataclass(frozen=True)
class SpanTree:
  """The input's span tree over `n_tokens` tokens (None: nothing left) and its m_t = 0 ranges."""

  root: SpanNode | None
  n_tokens: int
  masked: tuple[tuple[int, int], ...] = ()

  def update_mask_T(self) -> np.ndarray:
    mask_T = np.ones(self.n_tokens, np.float32)
    for start, end in self.masked:
      mask_T[start:end] = 0.0
    return mask_T

  def nodes(self) -> Iterable[SpanNode]:
    """Pre-order."""
    stack = [self.root] if self.root is not None else []
    while stack:
      node = stack.pop()
      yield node
      stack.extend(reversed(node.children))

  def to_json(self) -> str:
    nodes = [[n.label, n.start, n.end, len(n.children)] for n in self.nodes()]
    return json.dumps({"v": FORMAT_VERSION, "n": self.n_tokens,
                       "masked": [list(m) for m in self.masked], "nodes": nodes},
                      separators=(",", ":"), ensure_ascii=False)

  @classmethod
  def from_json(cls, text: str) -> "SpanTree":
    data = json.loads(text)
    if data.get("v") != FORMAT_VERSION:
      raise ValueError(f"span tree format {data.get('v')!r}, this code reads {FORMAT_VERSION}")
    rows = data["nodes"]
    root = None
    if rows:
      # Pre-order with child counts: frames of (row, children built so far).
      frames: list[tuple[list, list]] = []
      for index, row in enumerate(rows + [None]):
        while frames and len(frames[-1][1]) == frames[-1][0][3]:
          (label, start, end, _), kids = frames.pop()
          node = SpanNode(label, int(start), int(end), tuple(kids))
          if frames:
            frames[-1][1].append(node)
          else:
            root = node
        if row is None:
          break
        if root is not None or (index and not frames):
          raise ValueError("span tree JSON: nodes after the root is complete")
        frames.append((row, []))
      if frames or root is None:
        raise ValueError("span tree JSON: child counts exceed the nodes given")
    tree = cls(root, int(data["n"]), tuple((int(s), int(e)) for s, e in data["masked"]))
    tree.check()
    return tree

  def check(self) -> None:
    """ValueError when a span leaves its row [0, n_tokens) or its parent (a cached tree written
    for other ids, or edited): its chunks would index past the row."""
    stack = [(self.root, 0, self.n_tokens)] if self.root is not None else []
    while stack:
      node, low, high = stack.pop()
      if not low <= node.start <= node.end <= high:
        where = "its row" if (low, high) == (0, self.n_tokens) else f"its parent [{low}, {high})"
        raise ValueError(f"span tree JSON: node {node.label!r} [{node.start}, {node.end}) ends "
                         f"outside {where} of {self.n_tokens} tokens")
      stack.extend((child, node.start, node.end) for child in node.children)
    for start, end in self.masked:
      if not 0 <= start <= end <= self.n_tokens:
        raise ValueError(f"span tree JSON: masked range [{start}, {end}) outside its row of "
                         f"{self.n_tokens} tokens")


def _candidates(word: str) -> list[str]:
  """The spellings a PTB leaf may have in the raw text."""
  out = [word, ptb_unescape(word)]
  plain = word
  for escaped, raw in _INWORD:
    plain = plain.replace(escaped, raw)
  out.append(plain)
  if word in _QUOTES:
    out.extend(_QUOTES)
  return list(dict.fromkeys(c for c in out if c))


def find_words(text: str, words: Sequence[str], fields: Sequence[tuple[int, int]],
               example_id: str = "?") -> np.ndarray:
  """int64 (W, 2): the character range of each word, found left to right inside `fields`; then
  every non-space character of the fields must be covered (else the tree is not the fields')."""
  spans_W2 = np.zeros((len(words), 2), np.int64)
  cursor = fields[0][0] if fields else 0
  for w, word in enumerate(words):
    best = None
    for candidate in _candidates(word):
      for start, end in fields:
        if end <= cursor:
          continue
        at = text.find(candidate, max(cursor, start), end)
        if at >= 0:
          if best is None or (at, -len(candidate)) < (best[0], -best[1]):
            best = (at, len(candidate))
          break
    if best is None:
      raise SpanError(f"example {example_id}: tree word {w} {word!r} is not in the question text "
                      f"after character {cursor} (the tree does not match the question's words)")
    spans_W2[w] = best[0], best[0] + best[1]
    cursor = best[0] + best[1]
  covered = np.zeros(len(text) + 1, np.int64)
  np.add.at(covered, spans_W2[:, 0], 1)
  np.add.at(covered, spans_W2[:, 1], -1)
  covered = np.cumsum(covered)[:len(text)] > 0
  for start, end in fields:
    gap = [int(i) for i in np.flatnonzero(~covered[start:end]) + start if not text[i].isspace()]
    if gap:
      raise SpanError(f"example {example_id}: the tree's words do not cover the question text: "
                      f"{text[gap[0]:gap[0] + 20]!r} at character {gap[0]} is in no leaf")
  return spans_W2


def token_ranges(offsets_T2: np.ndarray, spans_N2: np.ndarray) -> np.ndarray:
  """int64 (N, 2): for each character range, the token range [first, last + 1) of the tokens
  overlapping it, or [0, 0) when none does (offsets are in text order; zero-width tokens such as
  BOS count as no overlap)."""
  spans_N2 = np.asarray(spans_N2, np.int64).reshape(-1, 2)
  if len(offsets_T2) == 0:
    return np.zeros_like(spans_N2)
  real_T = offsets_T2[:, 1] > offsets_T2[:, 0]
  ends_T = np.maximum.accumulate(np.where(real_T, offsets_T2[:, 1], 0))
  starts_T = np.maximum.accumulate(offsets_T2[:, 0])
  first_N = np.searchsorted(ends_T, spans_N2[:, 0], side="right")  # first t with end_t > start
  stop_N = np.searchsorted(starts_T, spans_N2[:, 1], side="left")  # first t with start_t >= end
  empty_N = first_N >= stop_N
  return np.stack([np.where(empty_N, 0, first_N), np.where(empty_N, 0, stop_N)], axis=1)


def _span_node(tree: Tree, ranges_W2: np.ndarray, at: int) -> tuple[SpanNode | None, int]:
  """The SpanNode of `tree` whose words take ranges_W2[at:]; (node or None, next word index).
  Iterative post-order (deep trees must not hit the recursion limit)."""
  frames: list[list] = [[tree, [], 0]]
  while True:
    frame = frames[-1]
    node, out, index = frame
    if index < len(node.children):
      frame[2] = index + 1
      child = node.children[index]
      if isinstance(child, str):
        start, end = int(ranges_W2[at, 0]), int(ranges_W2[at, 1])
        at += 1
        if end > start:
          out.append(SpanNode(child, start, end))
      else:
        frames.append([child, [], 0])
      continue
    frames.pop()
    made = _over(node.label, out)
    if not frames:
      return made, at
    if made is not None:
      frames[-1][1].append(made)


def _over(label: str, children: list[SpanNode]) -> SpanNode | None:
  if not children:
    return None
  return SpanNode(label, min(c.start for c in children), max(c.end for c in children),
                  tuple(children))


def _runs(mask_T: np.ndarray) -> tuple[tuple[int, int], ...]:
  """[start, end) runs where mask_T == 0."""
  zero = np.concatenate([[0], (mask_T == 0).astype(np.int8), [0]])
  edges = np.flatnonzero(np.diff(zero))
  return tuple((int(s), int(e)) for s, e in zip(edges[::2], edges[1::2]))


def span_tree(prompt: Prompt, trees: Sequence[Tree]) -> SpanTree:
  """The input's span tree (module docstring) from the parse trees of `prompt.parse_fields`, in
  text order (context sentences, then question sentences)."""
  words = [w for tree in trees for w in tree.leaves()]
  if not words:
    raise SpanError(f"example {prompt.example_id}: no parse trees for the question text")
  spans_W2 = find_words(prompt.text, words, prompt.parse_fields, prompt.example_id)
  ranges_W2 = token_ranges(prompt.offsets_T2, spans_W2)
  children: list[SpanNode] = []
  at = 0
  for tree in trees:
    node, at = _span_node(tree, ranges_W2, at)
    if node is not None:
      children.append(node)
  if prompt.kind == MCQA:
    lines_N2 = token_ranges(prompt.offsets_T2, np.asarray(prompt.option_lines))
    letters = [prompt.field_text(line).split(".", 1)[0] for line in prompt.option_lines]
    options = [SpanNode(letter, int(s), int(e)) for letter, (s, e) in zip(letters, lines_N2)
               if e > s]
    if options:
      children.append(_over(OPTIONS, options))
  if prompt.answer is not None:  # MCQA and CoLA's judgment prompt
    (s, e), = token_ranges(prompt.offsets_T2, np.asarray([prompt.answer]))
    if e > s:
      children.append(SpanNode(ANSWER, int(s), int(e)))
  return SpanTree(_over(ROOT, children), len(prompt), _runs(prompt.update_mask_T))


def heights(tree: SpanTree, k: int = K) -> tuple[list[np.ndarray], int]:
  """([height h → int32 (n_h, 2) token ranges, h = 0 … H], nodes cut): breadth-first, children
  left to right, at most k per height; an empty tree has no heights."""
  if tree.root is None:
    return [], 0
  by_depth = []
  frontier = [tree.root]
  while frontier:
    by_depth.append(frontier)
    frontier = [child for node in frontier for child in node.children]
  out, cut = [], 0
  for level in reversed(by_depth):  # height 0 = the deepest level
    cut += max(0, len(level) - k)
    out.append(np.asarray([(n.start, n.end) for n in level[:k]], np.int32).reshape(-1, 2))
  return out, cut


class Layout(NamedTuple):
  start_LK: np.ndarray  # int32
  end_LK: np.ndarray  # int32
  cut: int  # nodes beyond k at some height
  unread: int  # kept nodes at heights no layer reads (tree deeper than the model)


def chunk_layout(tree: SpanTree, n_layers: int, k: int = K) -> Layout:
  """One example's chunks per layer: layer ℓ holds height min(ℓ, H) (module docstring)."""
  start_LK = np.zeros((n_layers, k), np.int32)
  end_LK = np.zeros((n_layers, k), np.int32)
  levels, cut = heights(tree, k)
  if not levels:
    return Layout(start_LK, end_LK, cut, 0)
  top = len(levels) - 1  # H
  for layer in range(n_layers):
    chunks = levels[min(layer, top)]
    start_LK[layer, :len(chunks)] = chunks[:, 0]
    end_LK[layer, :len(chunks)] = chunks[:, 1]
  unread = sum(len(level) for level in levels[n_layers:])
  return Layout(start_LK, end_LK, cut, unread)


class ChunkBatch(NamedTuple):
  """The branch's static chunk arrays (module docstring); a NamedTuple, so a JAX pytree."""

  start_BLK: np.ndarray
  end_BLK: np.ndarray
  last_BLK: np.ndarray
  update_mask_BT: np.ndarray


def chunk_batch(span_trees: Sequence[SpanTree], n_layers: int, seq_len: int, k: int = K,
                counts: collections.Counter | None = None) -> ChunkBatch:
  """B examples' chunk arrays, padded to seq_len tokens; `counts` (optional) receives
  `chunks_cut` and `chunks_unread`. An example longer than seq_len is an error."""
  if n_layers < 1 or k < 1:
    raise ValueError(f"chunk_batch needs n_layers >= 1 and k >= 1, got {n_layers}, {k}")
  B = len(span_trees)
  start_BLK = np.zeros((B, n_layers, k), np.int32)
  end_BLK = np.zeros((B, n_layers, k), np.int32)
  mask_BT = np.ones((B, seq_len), np.float32)
  for b, tree in enumerate(span_trees):
    if tree.n_tokens > seq_len:
      raise ValueError(f"chunk_batch: example {b} has {tree.n_tokens} tokens, more than "
                       f"seq_len {seq_len}")
    layout = chunk_layout(tree, n_layers, k)
    start_BLK[b], end_BLK[b] = layout.start_LK, layout.end_LK
    mask_BT[b, :tree.n_tokens] = tree.update_mask_T()
    if counts is not None:
      counts["chunks_cut"] += layout.cut
      counts["chunks_unread"] += layout.unread
  last_BLK = np.where(end_BLK > start_BLK, end_BLK - 1, -1).astype(np.int32)
  return ChunkBatch(start_BLK, end_BLK, last_BLK, mask_BT)


def parse_sentences(prompt: Prompt, max_words: int | None = None,
                    counts: collections.Counter | None = None) -> list[list[str]]:
  """The PTB-word sentences the parser reads for `prompt`: each parse field split into sentences
  (`slm_jax.splitting`), a sentence longer than max_words cut into pieces of max_words
  (`counts["split_sentences"]` counts those)."""
  from slm_jax.splitting import default_splitter  # pylint: disable=import-outside-toplevel
  splitter = default_splitter()
  out: list[list[str]] = []
  for field in prompt.parse_fields:
    for sentence in splitter.split(prompt.field_text(field)):
      words = list(sentence.escaped)
      step = max_words or len(words)
      if counts is not None and len(words) > step:
        counts["split_sentences"] += 1
      out.extend(words[i:i + step] for i in range(0, len(words), step))
  return out
