"""Proposals from slm_jax's own parser: K distinct trees per sentence sampled from its CRF.

`ParserProposals(path=None, k=300, seed=0)` is a `ProposalSource` for BLiMP and doc-PPL (SPEC §9:
the paper marginalizes tree models over K = 300 parser proposals; it used benepar, whose weights
need a download — this one runs offline, `path` None = the shipped GUM model). `prefetch(all
sentences)` samples many sentences in one batched call (`Parser.proposals_batch`), which is much
faster than one at a time; `proposals(words)` serves from that cache, sampling what is missing.
An empty sentence or one longer than the parser's limit raises `NoProposals` (the evaluator's
fallback counts it). `stats` counts sentences served and sampled.
"""

from __future__ import annotations

import collections
from typing import Iterable, Sequence

from slm_jax.eval.proposals import NoProposals, ProposalSource
from slm_jax.trees import Tree

Words = tuple[str, ...]


class ParserProposals(ProposalSource):
  """K distinct CRF samples of `slm_jax.parser` per sentence (see the module docstring)."""

  def __init__(self, path: str | None = None, k: int = 300, seed: int = 0):
    if k < 1:
      raise ValueError(f"parser proposals need K >= 1, got {k}")
    from slm_jax.parser.api import load_parser  # pylint: disable=g-import-not-at-top
    self.parser = load_parser(path)
    self.path, self.k, self.seed = path, k, seed
    self._cache: dict[Words, list[Tree]] = {}
    self.stats: collections.Counter = collections.Counter()

  def _usable(self, words: Words) -> bool:
    return 0 < len(words) <= self.parser.max_words

  def prefetch(self, sentences: Iterable[Sequence[str]]) -> None:
    """Samples the proposals of every new, usable sentence in batched calls."""
    todo = list(dict.fromkeys(tuple(s) for s in sentences))
    todo = [w for w in todo if w not in self._cache and self._usable(w)]
    if not todo:
      return
    for words, found in zip(todo, self.parser.proposals_batch(todo, k=self.k, seed=self.seed)):
      self._cache[words] = [p.tree for p in found]
    self.stats["sampled"] += len(todo)

  def proposals(self, sentence_words: Sequence[str]) -> list[Tree]:
    words = tuple(sentence_words)
    if not self._usable(words):
      raise NoProposals(f"the parser takes 1 to {self.parser.max_words} words, got {len(words)}")
    if words not in self._cache:
      self.prefetch([words])
    self.stats["sentences"] += 1
    return self._cache[words]
