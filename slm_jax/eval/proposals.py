"""Parse proposals: K candidate trees per sentence, for tree-model marginalization (SPEC §9).

A `ProposalSource` maps a sentence (its words) to a list of distinct trees over exactly those words.
Sources:

- `FileProposals`: trees from a file, for any corpus (e.g. the K-best output of a parser).
  Two formats, chosen by the first non-blank character (`{` = JSONL):
  * JSONL, one sentence per line: `{"words": ["Cats", "chase", "mice"], "trees": ["(S Cats (VP
    chase mice))", ...]}`. `words` is optional (default: the first tree's leaves).
  * PTB blocks: the K trees of one sentence are consecutive bracketed trees (one or several lines
    each), and a blank line ends the block (sentence). Trees may carry POS tags and function tags.
  Trees are normalized as the PTB reader does (SPEC §1: no POS, no function tags) and must all have
  the sentence's words as leaves (else `ProposalError` naming file:line). Duplicate trees of a
  sentence are kept once; a sentence listed twice is an error.
- `GrammarPosterior` (in `grammar_posterior.py`): exact samples from the embedded grammar's
  posterior p(tree | words), by the inside algorithm over the known PCFG.
- `BeamProposals`: the tree model's own word-synchronous beam search (`slm_jax.inference.beam`): its
  completed hypotheses, delinearized, best first (for lin1/lin2/lin3 models; depends on the model).
- `FlatProposals`: the single tree `(S w1 … wn)`; a stand-in where no parser covers the words.
- `GoldProposals(documents)`: the gold tree of each sentence of an evaluation corpus (K = 1).
- `FallbackProposals(primary, fallback)`: the primary source, or the fallback where the primary
  has no proposals (counted in `.stats`).
- `ChainProposals([(name, source), ...])`: the first source in order that has proposals for the
  words; `.stats[name]` counts the sentences each source served (`auto` = grammar, parser, flat).

`proposals()` raises `NoProposals` when a source has nothing for the words.
"""

from __future__ import annotations

import abc
import collections
import dataclasses
import itertools
import json
import pathlib
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np

from slm_jax import files
from slm_jax.configurations import Configuration
from slm_jax.kinds import Kind
from slm_jax.linearize import INVERTIBLE_SCHEMES, LinearizationError, delinearize
from slm_jax.ptb import parse_trees
from slm_jax.trees import Tree

if TYPE_CHECKING:
  from slm_jax.inference.beam import BeamResult, BeamSearcher

Words = tuple[str, ...]


class NoProposals(LookupError):
  """A source has no tree for these words (unknown sentence, out-of-grammar words, no parse)."""


class ProposalError(ValueError):
  """A malformed proposals file; the message starts with `file:line:`."""


class ProposalSource(abc.ABC):
  """Candidate trees for a sentence."""

  @abc.abstractmethod
  def proposals(self, sentence_words: Sequence[str]) -> list[Tree]:
    """Distinct trees whose leaves are `sentence_words` (at most K); raises `NoProposals`."""

  def prefetch(self, sentences: Iterable[Sequence[str]]) -> None:
    """A hint: these sentences come next (a batched source computes them together)."""
    del sentences


# --- files ----------------------------------------------------------------------------------------

class FileProposals(ProposalSource):
  """Proposals read from a JSONL or PTB-blocks file (format in the module docstring)."""

  def __init__(self, path: str | pathlib.Path, k: int | None = None):
    self.path = pathlib.Path(path)
    self.k = k
    self.table: dict[Words, list[Tree]] = {}
    self.duplicates_dropped = 0
    text = self.path.read_text(encoding="utf-8")
    stripped = text.lstrip()
    if stripped.startswith("{"):
      self._read_jsonl(text)
    else:
      self._read_blocks(text)

  def __len__(self) -> int:
    return len(self.table)

  def proposals(self, sentence_words: Sequence[str]) -> list[Tree]:
    trees = self.table.get(tuple(sentence_words))
    if trees is None:
      raise NoProposals(f"{self.path}: no proposals for the sentence {' '.join(sentence_words)!r}")
    return trees if self.k is None else trees[:self.k]

  def _add(self, words: Words | None, trees: list[Tree], where: str) -> None:
    if not trees:
      raise ProposalError(f"{where}: a sentence without trees")
    if words is None:
      words = tuple(trees[0].leaves())
    for n, tree in enumerate(trees):
      leaves = tuple(tree.leaves())
      if leaves != words:
        raise ProposalError(f"{where}: tree {n} has leaves {' '.join(leaves)!r}, expected "
                            f"{' '.join(words)!r}")
    if words in self.table:
      raise ProposalError(f"{where}: the sentence {' '.join(words)!r} is listed twice")
    distinct = list(dict.fromkeys(trees))
    self.duplicates_dropped += len(trees) - len(distinct)
    self.table[words] = distinct

  def _parse(self, text: str, where: str) -> list[Tree]:
    try:
      return parse_trees(text, source=where)
    except ValueError as e:
      raise ProposalError(f"{where}: {e}") from e

  def _read_jsonl(self, text: str) -> None:
    for number, line in enumerate(files.text_lines(text), 1):
      if not line.strip():
        continue
      where = f"{self.path}:{number}"
      try:
        record = json.loads(line)
      except json.JSONDecodeError as e:
        raise ProposalError(f"{where}: not a JSON object: {e}") from e
      if not isinstance(record, dict) or not isinstance(record.get("trees"), list):
        raise ProposalError(f"{where}: expected an object with a list 'trees' (and optional "
                            "'words')")
      words = record.get("words")
      if words is not None and not (isinstance(words, list) and all(isinstance(w, str)
                                                                     for w in words)):
        raise ProposalError(f"{where}: 'words' must be a list of strings")
      trees = [t for s in record["trees"] for t in self._parse(str(s), where)]
      self._add(None if words is None else tuple(words), trees, where)

  def _read_blocks(self, text: str) -> None:
    block: list[str] = []
    start = 0
    for number, line in enumerate(files.text_lines(text) + [""], 1):
      if line.strip():
        if not block:
          start = number
        block.append(line)
      elif block:
        where = f"{self.path}:{start}"
        self._add(None, self._parse("\n".join(block), where), where)
        block = []


class FlatProposals(ProposalSource):
  """One flat tree `(label w1 … wn)` for any words."""

  def __init__(self, label: str = "S"):
    self.label = label

  def proposals(self, sentence_words: Sequence[str]) -> list[Tree]:
    if not sentence_words:
      raise NoProposals("an empty sentence has no tree")
    return [Tree(self.label, tuple(sentence_words))]


class GoldProposals(ProposalSource):
  """The gold tree of each sentence of an evaluation corpus (K = 1)."""

  def __init__(self, documents: Sequence[Sequence[Tree]]):
    self.table = {tuple(t.leaves()): [t] for doc in documents for t in doc}

  def proposals(self, sentence_words):
    try:
      return self.table[tuple(sentence_words)]
    except KeyError:
      raise NoProposals(f"no gold tree for {' '.join(sentence_words)!r}") from None


class FallbackProposals(ProposalSource):
  """`primary`, or `fallback` where the primary raises `NoProposals`; counts both in `stats`."""

  def __init__(self, primary: ProposalSource, fallback: ProposalSource):
    self.primary = primary
    self.fallback = fallback
    self.stats: collections.Counter = collections.Counter()

  def prefetch(self, sentences: Iterable[Sequence[str]]) -> None:
    self.primary.prefetch(sentences)

  def proposals(self, sentence_words: Sequence[str]) -> list[Tree]:
    try:
      out = self.primary.proposals(sentence_words)
      self.stats["primary"] += 1
      return out
    except NoProposals:
      self.stats["fallback"] += 1
      return self.fallback.proposals(sentence_words)


class ChainProposals(ProposalSource):
  """The first of `named` sources (in order) that has proposals for the words; `stats[name]`
  counts the sentences each one served. `prefetch` hands a source only the sentences the sources
  before it cannot serve (a batched parser never samples what the grammar parses)."""

  def __init__(self, named: Sequence[tuple[str, ProposalSource]]):
    if not named or len({n for n, _ in named}) != len(named):
      raise ValueError(f"a chain needs distinct source names, got {[n for n, _ in named]}")
    self.named = list(named)
    self.stats: collections.Counter = collections.Counter({name: 0 for name, _ in named})

  def prefetch(self, sentences: Iterable[Sequence[str]]) -> None:
    todo = list(dict.fromkeys(tuple(s) for s in sentences))
    for _, source in self.named:
      if not todo:
        return
      source.prefetch(todo)
      todo = [words for words in todo if not _serves(source, words)]

  def proposals(self, sentence_words: Sequence[str]) -> list[Tree]:
    reasons = []
    for name, source in self.named:
      try:
        out = source.proposals(sentence_words)
      except NoProposals as e:
        reasons.append(f"{name}: {e}")
        continue
      self.stats[name] += 1
      return out
    raise NoProposals("; ".join(reasons))


def _serves(source: ProposalSource, words: Words) -> bool:
  try:
    source.proposals(words)
    return True
  except NoProposals:
    return False


# --- the model's own beam search -----------------------------------------------------------------

def check_beam_proposals(configuration: Configuration) -> None:
  """Raises ValueError unless the model's completed beam hypotheses determine trees (lin1/2/3)."""
  lin, facts = configuration.linearization, configuration.scheme
  if facts.invertible:
    return
  if facts.scored_with_structure:
    raise ValueError(f"beam proposals need a one-to-one linearization "
                     f"({', '.join(INVERTIBLE_SCHEMES)}); {configuration.name} uses {lin}, whose "
                     "token sequences do not determine a tree: use a file of proposals "
                     "(--blimp_proposals=FILE / --docppl_proposals=FILE, e.g. a parser's K-best "
                     "trees)")
  raise ValueError(f"{configuration.name} ({lin}) is scored in terminal format and needs no "
                   "proposal trees; beam proposals are for tree models (lin1, lin2, lin3)")


@dataclasses.dataclass
class _Found:
  """What one beam search gave a sentence: its trees (at most k) and the counts of `stats`."""
  trees: list[Tree]
  k: int
  cap: int
  complete: int  # completed hypotheses
  beyond_k: int  # completed, not examined (k trees found before them)
  invalid: int  # completed, not a tree over the words


class BeamProposals(ProposalSource):
  """Proposals from the tree model itself: the hypotheses its word-synchronous beam search
  (`BeamSearcher.search(words, complete=True)`) closed and ended by EOS, delinearized, best joint
  log-prob first, at most `k` (distinct: lin1/lin2/lin3 are one-to-one, so distinct hypotheses are
  distinct trees). With k ≥ the completed count, the proposals' rescored logsumexp is the search's
  `sentence_logprob`.

  Word pieces: every hypothesis' terminal ids must be the pieces of the given words (else it is
  dropped and counted as `invalid`; the search never does this), and each word's pieces become
  that word, so the leaves are exactly the words asked for. `NoProposals` when nothing completed
  (the beam died or the length cap admits no tree). `stats` counts sentences, proposals,
  `complete` (completed hypotheses), `beyond_k` (completed, not returned), `no_parse` (sentences
  without proposals) and `invalid`, as each sentence's proposals are handed out.

  Batched: `prefetch(sentences)` queues the sentences that come next; asking for a queued
  sentence searches it together with up to `chunk` − 1 of the queued sentences after it
  (`BeamSearcher.iter_search`, the batched search: the same results as one at a time), and keeps
  their trees until they are asked for (at most `max_ready` sentences are kept; past that a
  sentence is searched alone). `last` is the latest `BeamResult` of a sentence searched alone.
  """

  def __init__(self, searcher: "BeamSearcher", k: int = 300, *, chunk: int = 64,
               max_ready: int = 1024):
    check_beam_proposals(searcher.configuration)
    if k < 1 or chunk < 1:
      raise ValueError(f"need k >= 1 proposals and chunk >= 1, got {k}, {chunk}")
    self.searcher = searcher
    self.k = int(k)
    self.chunk, self.max_ready = int(chunk), int(max_ready)
    self.stats: collections.Counter = collections.Counter()
    self.last: "BeamResult | None" = None
    self._queued: dict[Words, None] = {}  # prefetched, not searched yet (in order)
    self._ready: dict[Words, _Found] = {}

  @classmethod
  def for_model(cls, model: Any, tokenizer: Any, configuration: Configuration, *, k: int = 300,
                **beam_options) -> "BeamProposals":
    """A source over a fresh `BeamSearcher(model, tokenizer, configuration, **beam_options)`."""
    check_beam_proposals(configuration)  # before building anything
    from slm_jax.inference.beam import BeamSearcher  # pylint: disable=g-import-not-at-top
    return cls(BeamSearcher(model, tokenizer, configuration, **beam_options), k=k)

  def prefetch(self, sentences: Iterable[Sequence[str]]) -> None:
    for words in sentences:
      words = tuple(words)
      if words and words not in self._ready:
        self._queued[words] = None

  def proposals(self, sentence_words: Sequence[str]) -> list[Tree]:
    words = tuple(sentence_words)
    self.stats["sentences"] += 1
    if not words:
      self.stats["no_parse"] += 1
      raise NoProposals("an empty sentence has no tree")
    found = self._ready.pop(words, None)
    if found is None or found.k != self.k:
      found = self._search(words)
    self.stats["complete"] += found.complete
    self.stats["beyond_k"] += found.beyond_k
    self.stats["invalid"] += found.invalid
    if not found.trees:
      self.stats["no_parse"] += 1
      raise NoProposals(f"the beam search (beam {self.searcher.beam}, length cap {found.cap}) "
                        f"completed no tree over {' '.join(words)!r}")
    self.stats["proposals"] += len(found.trees)
    return found.trees

  def _search(self, words: Words) -> _Found:
    """Searches `words` (with the queued sentences after it, room permitting); its trees."""
    queued = list(self._queued)
    self._queued.pop(words, None)
    batch = [words]
    if words in queued and len(self._ready) + self.chunk <= self.max_ready:
      after = queued[queued.index(words) + 1:][:self.chunk - 1]
      batch += after
      for other in after:
        del self._queued[other]
    if len(batch) == 1:
      result = self.last = self.searcher.search(words, complete=True)
      return self._found(words, result)
    for i, result in self.searcher.iter_search(batch, complete=True):
      self._ready[batch[i]] = self._found(batch[i], result)
    return self._ready.pop(words)

  def _found(self, words: Words, result: "BeamResult") -> _Found:
    pieces = [self.searcher.tokenizer.encode_word(w) for w in words]
    expected = np.fromiter(itertools.chain.from_iterable(pieces), np.int64)
    first_piece = np.zeros(len(expected), bool)
    first_piece[np.cumsum([0] + [len(p) for p in pieces[:-1]])] = True
    lin = self.searcher.configuration.linearization
    trees: list[Tree] = []
    invalid = beyond = 0
    for n, hyp in enumerate(result.complete):
      if len(trees) == self.k:
        beyond = len(result.complete) - n
        break
      tree = _hypothesis_tree(hyp, words, expected, first_piece, lin)
      if tree is None:
        invalid += 1
      else:
        trees.append(tree)
    return _Found(trees, self.k, result.cap, len(result.complete), beyond, invalid)


def _hypothesis_tree(hyp, words: Words, expected_ids: np.ndarray, first_piece: np.ndarray,
                     linearization: str) -> Tree | None:
  """The tree of a completed hypothesis with `words` as leaves (None: not a tree over them)."""
  terminal = hyp.kinds == Kind.TERMINAL
  if not np.array_equal(np.asarray(hyp.ids)[terminal], expected_ids):
    return None
  keep = ~terminal
  keep[np.flatnonzero(terminal)[first_piece]] = True  # one symbol per word: its first piece
  symbols = np.asarray(hyp.symbols, dtype=object)
  symbols[np.flatnonzero(terminal)[first_piece]] = words
  try:
    trees = delinearize(symbols[keep].tolist(), hyp.kinds[keep], linearization)
  except LinearizationError:
    return None
  if len(trees) != 1 or tuple(trees[0].leaves()) != words:
    return None
  return trees[0]


__all__ = ["ProposalSource", "FileProposals", "BeamProposals", "FlatProposals",
           "FallbackProposals", "ChainProposals", "NoProposals",
           "ProposalError", "check_beam_proposals"]
