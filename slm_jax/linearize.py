"""Tree linearizations (SPEC §2, paper Table 1), each token tagged with its `Kind`.

Two steps, so every scheme shares one traversal and the hot path is numpy:
1. `base_sequence(document)` walks the trees once and emits the lin1 sequence of the document,
   `<s> (S Cats (VP chase mice VP) S) … </s>`, with kinds and the sentence index of every token.
   A tokenizer may now expand each word into its pieces (all pieces of a word are terminals in the
   word's place); `Sequence.expand` does that for any per-token repeat counts.
2. `derive(base, scheme)` turns the lin1 sequence into any scheme with vectorized numpy
   (repeat / select / permute). It never looks at the token values, only at kinds, so it works on
   symbol strings (object arrays, for `explain`) and on vocabulary ids alike.

`delinearize` inverts the one-to-one schemes (lin1, lin2, lin3). lin0, pause1/2 drop the tree;
lin1_noont, lin1_merge and lin1_shuf are many-to-one.

The scheme table (`SCHEME_TABLE`, `get_scheme(name)`) holds every per-scheme fact other modules
need — closing expansion, brackets, invertibility, the scheme it is scored as, beam search,
NT targets, what is tokenized, TG masks — in the style of `configurations._TABLE`; nothing
else writes a list of scheme names.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Sequence as SequenceT

import numpy as np

from slm_jax.kinds import (BOS_CODE as _BOS, BOS_SYMBOL, CNT1_CODE as _CNT1, CNT2_CODE as _CNT2,
                           CNT_CODE as _CNT, EOS_CODE as _EOS, EOS_SYMBOL, MERGED_CLOSE_SYMBOL,
                           ONT_CODE as _ONT, PAUSE_CODE as _PAUSE, PAUSE_SYMBOL,
                           TERMINAL_CODE as _TERMINAL, Kind, cnt_symbol, ont_symbol)
from slm_jax.trees import Tree



@dataclasses.dataclass(frozen=True)
class Scheme:
  """The facts about one linearization that the rest of slm_jax reads (the one scheme table)."""

  name: str
  closing_expansion: tuple[int, ...]  # kinds of the tokens one closing becomes; () = no brackets
  opens: bool  # has opening-NT tokens `(S`
  invertible: bool  # the token sequence determines the tree (`delinearize` works)
  scored_as: str  # the scheme evaluators score sentences in (SPEC §9: Tree-Shuffle as lin0)
  beam_searchable: bool  # the word-synchronous beam can emit its structural tokens
  structure_targets: bool  # its NT tokens are prediction targets (SPEC §4: not in lin1_shuf)
  tokenize_from: str  # the base is cut to this scheme before tokenizing (dropped brackets are
  #                     never tokenized)
  tg_masks: bool  # TG-family masks apply (COMPOSE at CNT1, CNT2 hidden): only lin2 marks CNT1
  shuffled: bool  # NT tokens move to random slots, keyed by (seed, word-level document)

  @property
  def has_brackets(self) -> bool:
    return bool(self.closing_expansion)

  @property
  def terminal_format(self) -> str:
    """The bracket-free scheme its sentences are written in when scored as words alone."""
    return "lin0" if self.has_brackets else self.name

  @property
  def scored_with_structure(self) -> bool:
    """Evaluation marginalizes over proposal trees (a "tree model"); False: scored as words."""
    return get_scheme(self.scored_as).has_brackets


_C, _C1, _C2 = _CNT, _CNT1, _CNT2
_TABLE = (  # name, closing expansion, opens, invertible, scored as, beam, NT targets, tokenize
    # from, TG masks, shuffled (SPEC §2 order)
    ("lin0", (), False, False, "lin0", False, True, "lin0", False, False),
    ("lin1", (_C,), True, True, "lin1", True, True, "lin1", False, False),
    ("lin2", (_C1, _C2), True, True, "lin2", True, True, "lin1", True, False),
    ("lin3", (_C, _C2, _C2), True, True, "lin3", True, True, "lin1", False, False),
    ("lin1_noont", (_C,), False, False, "lin1_noont", True, True, "lin1_noont", False, False),
    ("lin1_merge", (_C,), True, False, "lin1_merge", True, True, "lin1", False, False),
    ("lin1_shuf", (_C,), True, False, "lin0", False, False, "lin1", False, True),
    ("pause1", (), False, False, "pause1", False, True, "lin0", False, False),
    ("pause2", (), False, False, "pause2", False, True, "lin0", False, False),
)
SCHEME_TABLE = {row[0]: Scheme(*row) for row in _TABLE}
SCHEMES = tuple(SCHEME_TABLE)
# Derived families (read from the table; never written out by hand elsewhere).
INVERTIBLE_SCHEMES = tuple(s.name for s in SCHEME_TABLE.values() if s.invertible)
TERMINAL_SCHEMES = tuple(s.name for s in SCHEME_TABLE.values() if not s.has_brackets)
TREE_SCHEMES = tuple(s.name for s in SCHEME_TABLE.values() if s.has_brackets)


def get_scheme(name: str) -> Scheme:
  """The table row of linearization `name` (ValueError naming the known ones)."""
  try:
    return SCHEME_TABLE[name]
  except KeyError:
    raise ValueError(f"unknown linearization {name!r}; expected one of "
                     f"{', '.join(SCHEME_TABLE)}") from None


class LinearizationError(ValueError):
  """A token sequence that no tree linearizes to (raised by `delinearize`); names the position."""

  def __init__(self, position: int, reason: str):
    self.position = position
    self.reason = reason
    super().__init__(f"token {position}: {reason}")


@dataclasses.dataclass(frozen=True)
class Sequence:
  """A linearized document: parallel arrays over its T tokens.

  tokens_T: symbols (object array of str) or vocabulary ids (int array).
  kinds_T: `Kind` values (int8).
  sentence_T: index of the sentence each token belongs to (BOS goes with the first sentence,
    EOS with the last), so packers can cut documents only between sentences (SPEC §8).
  unit_T: index of the unit a token belongs to; a unit is a whole word (all its pieces) or one
    non-word token. Shuffling moves units, so pieces of a word never separate.
  """

  tokens: np.ndarray
  kinds: np.ndarray
  sentence: np.ndarray
  unit: np.ndarray

  def __len__(self) -> int:
    return int(self.kinds.shape[0])

  def take(self, index_T: np.ndarray, kinds_T: np.ndarray | None = None) -> "Sequence":
    return Sequence(self.tokens.take(index_T),
                    self.kinds.take(index_T) if kinds_T is None else kinds_T,
                    self.sentence.take(index_T), self.unit.take(index_T))

  def expand(self, repeats_T: np.ndarray, tokens: np.ndarray) -> "Sequence":
    """Repeats token i `repeats_T[i]` times (e.g. a word into its pieces) with new `tokens`."""
    index = np.repeat(np.arange(len(self)), repeats_T)
    if len(tokens) != len(index):
      raise ValueError(f"expand: {len(tokens)} tokens for {len(index)} expanded positions")
    return Sequence(np.asarray(tokens), self.kinds[index], self.sentence[index], self.unit[index])

  def symbols(self) -> list[str]:
    return [str(t) for t in self.tokens.tolist()]


def _append_lin1(tree: Tree, symbols: list, kinds: list) -> None:
  """Iterative pre/post-order walk: `(L` children `L)` (a deep tree never hits recursion limits)."""
  stack: list = [tree]
  while stack:
    node = stack.pop()
    if isinstance(node, str):
      symbols.append(node)
      kinds.append(Kind.TERMINAL)
    elif isinstance(node, tuple):  # closing marker
      symbols.append(cnt_symbol(node[0]))
      kinds.append(Kind.CNT)
    else:
      symbols.append(ont_symbol(node.label))
      kinds.append(Kind.ONT)
      stack.append((node.label,))
      stack.extend(reversed(node.children))


def base_sequence(document: SequenceT[Tree] | Tree) -> Sequence:
  """lin1 sequence `<s> s1 s2 … </s>` of a document (a list of sentence trees, or one tree)."""
  if isinstance(document, Tree):
    document = [document]
  if len(document) == 0:
    raise ValueError("cannot linearize an empty document (no sentences)")
  symbols: list = [BOS_SYMBOL]
  kinds: list = [Kind.BOS]
  lengths = []
  for tree in document:
    before = len(symbols)
    _append_lin1(tree, symbols, kinds)
    lengths.append(len(symbols) - before)
  symbols.append(EOS_SYMBOL)
  kinds.append(Kind.EOS)
  sentence = np.repeat(np.arange(len(lengths), dtype=np.int32), lengths)
  sentence = np.concatenate([[0], sentence, [len(lengths) - 1]]).astype(np.int32)
  tokens = np.empty(len(symbols), dtype=object)
  tokens[:] = symbols
  n = len(symbols)
  return Sequence(tokens, np.asarray(kinds, dtype=np.int8), sentence, np.arange(n, dtype=np.int32))


def document_key(base: Sequence) -> int:
  """A stable 63-bit key of a document's content (seeds lin1_shuf per document)."""
  digest = hashlib.blake2b("\x1f".join(base.symbols()).encode("utf-8"), digest_size=8).digest()
  return int.from_bytes(digest, "little") >> 1


def _with_copies(base: Sequence, copied_T: np.ndarray, copies: int, copy_kind: int, *,
                 first_kind: int | None = None, copy_token=None) -> Sequence:
  """Follows every token with `copied_T` set by `copies` copies of kind `copy_kind`; the copied
  token itself gets `first_kind` if given. `copy_token`, when given, is the token value of the
  copies (pause insertion); else they repeat the token.
  """
  index = np.repeat(np.arange(len(base)), copied_T.view(np.int8) * np.int8(copies) + np.int8(1))
  kinds = base.kinds.take(index)
  source = np.flatnonzero(copied_T)
  first = source + copies * np.arange(len(source))  # output position of each copied token
  if first_kind is not None:
    kinds[first] = first_kind
  copy_at = (first[:, None] + np.arange(1, copies + 1)).ravel()
  kinds[copy_at] = copy_kind
  tokens = base.tokens.take(index)
  if copy_token is not None:
    tokens[copy_at] = copy_token
  return Sequence(tokens, kinds, base.sentence.take(index), base.unit.take(index))


def _shuffle(base: Sequence, seed: int, doc_key: int) -> Sequence:
  """lin1_shuf: within each sentence, NT units go to random slots; words keep their order."""
  kinds = base.kinds
  inner = (kinds != _BOS) & (kinds != _EOS)
  unit_first = np.ones(len(base), dtype=bool)
  unit_first[1:] = base.unit[1:] != base.unit[:-1]
  unit_pos = np.flatnonzero(unit_first & inner)  # first token of each movable unit
  if len(unit_pos) == 0:
    return base
  unit_is_word = kinds[unit_pos] == _TERMINAL
  rng = np.random.default_rng([seed, doc_key])
  order = np.lexsort((rng.random(len(unit_pos)), base.sentence[unit_pos]))
  shuffled = unit_pos[order]
  # Slots holding a word after the permutation get the words back in their original order.
  shuffled[unit_is_word[order]] = unit_pos[unit_is_word]
  unit_len = np.diff(np.append(np.flatnonzero(unit_first), len(base)))
  len_of_unit = np.zeros(len(base), dtype=np.int64)
  len_of_unit[unit_first] = unit_len
  lengths = len_of_unit[shuffled]
  starts = np.repeat(shuffled - np.cumsum(np.concatenate([[0], lengths[:-1]])), lengths)
  moved = starts + np.arange(lengths.sum())
  index = np.concatenate([np.flatnonzero(kinds == _BOS), moved,
                          np.flatnonzero(kinds == _EOS)])
  return base.take(index)


def derive(base: Sequence, scheme: str, *, seed: int = 0, doc_key: int | None = None,
           pause_token=PAUSE_SYMBOL, merged_close_token=MERGED_CLOSE_SYMBOL) -> Sequence:
  """The `scheme` linearization of a document from its lin1 `base_sequence` (SPEC §2).

  `seed`/`doc_key` make lin1_shuf deterministic per (seed, document); `doc_key` defaults to
  `document_key(base)`, so pass the key of the word-level base when `base` holds piece ids.
  `pause_token` / `merged_close_token` are the token values inserted for `<P>` and merged `)`.
  """
  kinds = base.kinds
  is_closing = kinds == _CNT
  if scheme == "lin1":
    return base
  if scheme == "lin0":
    return base.take(np.flatnonzero((kinds != _ONT) & ~is_closing))
  if scheme in ("lin2", "lin3"):
    first, *copies = SCHEME_TABLE[scheme].closing_expansion
    return _with_copies(base, is_closing, len(copies), _CNT2, first_kind=first)
  if scheme == "lin1_noont":
    return base.take(np.flatnonzero(kinds != _ONT))
  if scheme == "lin1_merge":
    run_start = is_closing.copy()
    run_start[1:] &= ~is_closing[:-1]
    out = base.take(np.flatnonzero(~is_closing | run_start))
    tokens = out.tokens.copy()
    tokens[out.kinds == _CNT] = merged_close_token
    return dataclasses.replace(out, tokens=tokens)
  if scheme == "lin1_shuf":
    return _shuffle(base, seed, document_key(base) if doc_key is None else doc_key)
  if scheme in ("pause1", "pause2"):
    terminal = derive(base, "lin0")
    return _with_copies(terminal, terminal.kinds == _TERMINAL, 1 if scheme == "pause1" else 2,
                        _PAUSE, copy_token=pause_token)
  raise ValueError(f"unknown linearization {scheme!r}; expected one of {', '.join(SCHEMES)}")


def linearize(document: SequenceT[Tree] | Tree, scheme: str, *, seed: int = 0) -> Sequence:
  """Symbols and kinds of `document` in `scheme` (word level; see module docstring)."""
  return derive(base_sequence(document), scheme, seed=seed)


def delinearize(symbols: SequenceT[str], kinds: SequenceT[int], scheme: str) -> list[Tree]:
  """The sentence trees of a lin1/lin2/lin3 document (BOS/EOS/PAD are skipped).

  Raises `LinearizationError` naming the first token where the sequence is not a linearization.
  """
  facts = get_scheme(scheme)
  if not facts.invertible:
    raise ValueError(f"{scheme} is not one-to-one; delinearize supports {INVERTIBLE_SCHEMES}")
  copies = len(facts.closing_expansion)
  first_kind = Kind(facts.closing_expansion[0])
  sentences: list[Tree] = []
  open_nodes: list[tuple[str, list]] = []  # (label, children) of open constituents
  pending_copies = 0
  pending_symbol = ""
  if len(symbols) != len(kinds):
    raise LinearizationError(0, f"{len(symbols)} symbols but {len(kinds)} kinds")
  for position, (symbol, kind) in enumerate(zip(symbols, kinds)):
    kind = Kind(int(kind))
    if pending_copies:
      if kind != Kind.CNT2 or symbol != pending_symbol:
        raise LinearizationError(position, f"expected copy of {pending_symbol!r} (CNT2), got "
                                 f"{symbol!r} ({kind.name})")
      pending_copies -= 1
      continue
    if kind in (Kind.BOS, Kind.EOS, Kind.PAD):
      if open_nodes:
        raise LinearizationError(position, f"{kind.name} inside an open constituent "
                                 f"({open_nodes[-1][0]})")
    elif kind == Kind.ONT:
      if not symbol.startswith("(") or len(symbol) < 2:
        raise LinearizationError(position, f"opening symbol {symbol!r} is not '(LABEL'")
      open_nodes.append((symbol[1:], []))
    elif kind == Kind.TERMINAL:
      if not open_nodes:
        raise LinearizationError(position, f"word {symbol!r} outside any constituent")
      open_nodes[-1][1].append(symbol)
    elif kind == first_kind:
      if not open_nodes:
        raise LinearizationError(position, f"closing {symbol!r} with no open constituent")
      label, children = open_nodes.pop()
      if symbol != cnt_symbol(label):
        raise LinearizationError(position, f"closing {symbol!r} does not match open ({label}")
      if not children:
        raise LinearizationError(position, f"empty constituent ({label}")
      node = Tree(label, tuple(children))
      (open_nodes[-1][1] if open_nodes else sentences).append(node)
      pending_copies, pending_symbol = copies - 1, symbol
    else:
      raise LinearizationError(position, f"kind {kind.name} does not occur in {scheme}")
  if pending_copies:
    raise LinearizationError(len(symbols), f"sequence ends before copies of {pending_symbol!r}")
  if open_nodes:
    raise LinearizationError(len(symbols), f"{len(open_nodes)} constituents left open")
  return sentences
