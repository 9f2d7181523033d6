"""Exact parse proposals for the embedded grammar: samples from p(tree | words) by the inside
algorithm over the known PCFG (`slm_jax.corpus.grammar.default_grammar()`), returned as the same
normalized output trees the generator produces (`grammar.to_output_tree`); `exact_enumeration` is
the brute-force oracle the tests compare against. A `ProposalSource` (see `proposals.py`).
"""

from __future__ import annotations

import collections
import math
import zlib
from typing import Iterable, Sequence

import numpy as np

from slm_jax.corpus.grammar import LEXICAL, Pcfg, default_grammar
from slm_jax.eval.proposals import NoProposals, ProposalSource, Words
from slm_jax.trees import Tree

class _Binarized:
  """The grammar as integer tables: rules of 3-5 symbols become chains of binary rules through
  fresh intermediate symbols (`A -> X Y Z` = `A -> X A|r.1`, `A|r.1 -> Y Z`), which are spliced
  out again when a derivation is built. Unary rules are grouped into levels so that a level's
  right-hand sides are complete before it is applied (the grammar has no unary cycles)."""

  def __init__(self, grammar: Pcfg):
    self.grammar = grammar
    names = list(grammar.nonterminals)
    binary: list[tuple[str, str, str, float]] = []
    unary: list[tuple[str, str, float]] = []
    for r_index, rule in enumerate(grammar.rules):
      rhs = rule.rhs
      if len(rhs) == 1:
        unary.append((rule.lhs, rhs[0], rule.prob))
        continue
      lhs, prob = rule.lhs, rule.prob
      for pos in range(len(rhs) - 2):
        fresh = f"{rule.lhs}|{r_index}.{pos + 1}"
        names.append(fresh)
        binary.append((lhs, rhs[pos], fresh, prob))
        lhs, prob = fresh, 1.0
      binary.append((lhs, rhs[-2], rhs[-1], prob))
    self.names = names
    self.index = {s: i for i, s in enumerate(names)}
    self.num_real = len(grammar.nonterminals)
    self.start = self.index[grammar.start]
    self.is_lexical = np.array([i < self.num_real and grammar.kinds[s] == LEXICAL
                                for i, s in enumerate(names)])
    ix = self.index
    self.b_lhs = np.array([ix[a] for a, _, _, _ in binary], dtype=np.int64)
    self.b_left = np.array([ix[b] for _, b, _, _ in binary], dtype=np.int64)
    self.b_right = np.array([ix[c] for _, _, c, _ in binary], dtype=np.int64)
    self.b_prob = np.array([p for _, _, _, p in binary])
    self.b_onehot = np.zeros((len(binary), len(names)))
    self.b_onehot[np.arange(len(binary)), self.b_lhs] = 1.0
    rules_of: dict[int, list[int]] = collections.defaultdict(list)
    for r, a in enumerate(self.b_lhs.tolist()):
      rules_of[a].append(r)
    self.binary_of = {a: np.array(rs) for a, rs in rules_of.items()}
    self.unary_of: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    by_lhs: dict[int, list[tuple[int, float]]] = collections.defaultdict(list)
    for a, b, p in unary:
      by_lhs[ix[a]].append((ix[b], p))
    for a, pairs in by_lhs.items():
      self.unary_of[a] = (np.array([b for b, _ in pairs]), np.array([p for _, p in pairs]))
    level: dict[int, int] = {}

    def level_of(a: int) -> int:
      if a not in level:
        level[a] = 0 if a not in by_lhs else 1 + max(level_of(b) for b, _ in by_lhs[a])
      return level[a]

    levels = max((level_of(a) for a in by_lhs), default=0)
    self.unary_levels = []  # [S, S] matrices U with U[b, a] = p(a -> b), one per level
    for lv in range(1, levels + 1):
      mat = np.zeros((len(names), len(names)))
      for a, pairs in by_lhs.items():
        if level[a] == lv:
          for b, p in pairs:
            mat[b, a] += p
      self.unary_levels.append(mat)
    self.lexicon: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    entries: dict[str, list[tuple[int, float]]] = collections.defaultdict(list)
    for r in grammar.lexical_rules:
      entries[r.word].append((ix[r.lhs], r.prob))
    for word, pairs in entries.items():
      self.lexicon[word] = (np.array([a for a, _ in pairs]), np.array([p for _, p in pairs]))


class _Chart:
  """Inside chart of one sentence: `inside[i, l, A]` = scaled inside probability of symbol A over
  words i .. i+l-1. Word i's lexical probabilities are scaled by 1 / their maximum, so no product
  underflows; every analysis of a span shares the span's scale, so sampling ratios are exact and
  `log_total` removes the scales again."""

  def __init__(self, tables: _Binarized, words: Words):
    n = len(words)
    if n == 0:
      raise NoProposals("an empty sentence has no tree")
    unknown = [w for w in words if w not in tables.lexicon]
    if unknown:
      raise NoProposals(f"words not in the grammar's lexicon: {' '.join(unknown[:5])}")
    self.tables, self.words, self.n = tables, words, n
    num = len(tables.names)
    chart = np.zeros((n, n + 1, num))
    log_scale = 0.0
    for i, w in enumerate(words):
      cats, probs = tables.lexicon[w]
      top = probs.max()
      chart[i, 1, cats] = probs / top
      log_scale += math.log(top)
    chart[:, 1] = self._unary(chart[:, 1])
    for length in range(2, n + 1):
      starts = np.arange(n - length + 1)
      splits = np.arange(1, length)
      left = chart[starts[:, None], splits[None, :]]  # [S, K, N]
      right = chart[starts[:, None] + splits[None, :], length - splits[None, :]]
      values = np.einsum("skr,skr->sr", left[:, :, tables.b_left], right[:, :, tables.b_right])
      chart[starts, length] = self._unary((values * tables.b_prob) @ tables.b_onehot)
    self.inside = chart
    total = chart[0, n, tables.start]
    self.log_total = math.log(total) + log_scale if total > 0 else -math.inf

  def _unary(self, values_SN: np.ndarray) -> np.ndarray:
    for mat in self.tables.unary_levels:
      values_SN = values_SN + values_SN @ mat
    return values_SN


class _Sampler:
  """Top-down sampling of many derivations at once. Samples that make the same choice at a node
  are handled as one group, so each distinct (node, group) is visited once; subtrees are shared."""

  def __init__(self, chart: _Chart, rng: np.random.Generator):
    self.chart, self.rng = chart, rng
    self.tables = chart.tables
    self.options: dict[tuple[int, int, int], tuple] = {}

  def _options(self, a: int, i: int, length: int):
    key = (a, i, length)
    if key not in self.options:
      t, inside = self.tables, self.chart.inside
      kinds, weights = [], []
      if a in t.unary_of:
        rhs, probs = t.unary_of[a]
        kinds += [("u", int(b), 0) for b in rhs.tolist()]
        weights.append(probs * inside[i, length, rhs])
      if length >= 2 and a in t.binary_of:
        rules = t.binary_of[a]
        splits = np.arange(1, length)
        w_RK = (t.b_prob[rules, None] * inside[i, splits][:, t.b_left[rules]].T
                * inside[i + splits, length - splits][:, t.b_right[rules]].T)
        kinds += [("b", int(r), int(k)) for r in rules.tolist() for k in splits.tolist()]
        weights.append(w_RK.ravel())
      cum = np.cumsum(np.concatenate(weights)) if weights else np.zeros(0)
      if not len(cum) or cum[-1] <= 0:
        raise RuntimeError(f"no analysis of {self.tables.names[a]} over words {i}..{i + length}")
      self.options[key] = (cum, kinds)
    return self.options[key]

  def sample(self, a: int, i: int, length: int, count: int) -> tuple[np.ndarray, list[tuple]]:
    """(codes [count], fragments): sample m's subtree is fragments[codes[m]], a tuple of the
    derivation children it contributes (one Tree for a real symbol; the spliced children of an
    intermediate symbol)."""
    t = self.tables
    if count == 1:
      return np.zeros(1, dtype=np.int64), [self._one(a, i, length)]
    if t.is_lexical[a]:
      return np.zeros(count, dtype=np.int64), [(Tree(t.names[a], (self.chart.words[i],)),)]
    cum, kinds = self._options(a, i, length)
    choice = np.searchsorted(cum, self.rng.random(count) * cum[-1], side="right")
    choice = np.minimum(choice, len(cum) - 1)
    real = a < t.num_real
    codes = np.empty(count, dtype=np.int64)
    fragments: list[tuple] = []
    for c in np.unique(choice).tolist():
      members = np.flatnonzero(choice == c)
      kind, x, k = kinds[c]
      if kind == "u":
        pairs, sub = self.sample(x, i, length, len(members))
        uniq, inverse = np.unique(pairs, return_inverse=True)
        kids = [sub[u] for u in uniq.tolist()]
      else:
        lc, left = self.sample(int(t.b_left[x]), i, k, len(members))
        rc, right = self.sample(int(t.b_right[x]), i + k, length - k, len(members))
        uniq, inverse = np.unique(lc * len(right) + rc, return_inverse=True)
        kids = [left[u // len(right)] + right[u % len(right)] for u in uniq.tolist()]
      codes[members] = inverse.reshape(-1) + len(fragments)
      fragments.extend((Tree(t.names[a], kid),) if real else kid for kid in kids)
    return codes, fragments

  def _one(self, a: int, i: int, length: int) -> tuple:
    """One sample's fragment (the same draws as `sample` with count 1)."""
    t = self.tables
    if t.is_lexical[a]:
      return (Tree(t.names[a], (self.chart.words[i],)),)
    cum, kinds = self._options(a, i, length)
    c = min(int(np.searchsorted(cum, self.rng.random() * cum[-1], side="right")), len(cum) - 1)
    kind, x, k = kinds[c]
    if kind == "u":
      kids = self._one(x, i, length)
    else:
      kids = self._one(int(t.b_left[x]), i, k) + self._one(int(t.b_right[x]), i + k, length - k)
    return (Tree(t.names[a], kids),) if a < t.num_real else kids


class GrammarPosterior(ProposalSource):
  """Exact samples from the PCFG posterior p(tree | words) of a grammar (default: the embedded
  treebank's), K per sentence, deduplicated after conversion to output trees.

  `proposals(words)` draws `k` derivations (seeded per sentence: `default_rng([seed, crc of the
  words])`, so a sentence's proposals do not depend on what was asked before), maps them with
  `grammar.to_output_tree` and returns the distinct output trees in order of first draw (at most k;
  typically far fewer, since the posterior of the embedded grammar is peaked). Results are cached
  per sentence (`cache_size` sentences), so several models evaluated on the same words share them.
  """

  def __init__(self, k: int = 300, seed: int = 0, grammar: Pcfg | None = None,
               cache_size: int = 100_000):
    self.k = k
    self.seed = seed
    self.grammar = grammar or default_grammar()
    self.tables = _Binarized(self.grammar)
    self.cache_size = cache_size
    self._cache: dict[Words, list[Tree] | str] = {}  # results are deterministic per sentence

  def chart(self, words: Sequence[str]) -> _Chart:
    return _Chart(self.tables, tuple(words))

  def log_marginal(self, words: Sequence[str]) -> float:
    """log p(words) under the grammar (the inside total; -inf when no derivation)."""
    try:
      return self.chart(words).log_total
    except NoProposals:
      return -math.inf

  def rng_for(self, words: Sequence[str]) -> np.random.Generator:
    key = zlib.crc32("\x1f".join(words).encode("utf-8"))
    return np.random.default_rng([self.seed, key])

  def sample_derivations(self, words: Sequence[str], k: int,
                         rng: np.random.Generator | None = None) -> tuple[np.ndarray, list[Tree]]:
    """(codes [k], distinct derivations): draw m is derivations[codes[m]]."""
    chart = self.chart(words)
    if chart.log_total == -math.inf:
      raise NoProposals(f"the grammar has no parse of {' '.join(words)!r}")
    sampler = _Sampler(chart, rng if rng is not None else self.rng_for(words))
    codes, fragments = sampler.sample(self.tables.start, 0, chart.n, k)
    return codes, [f[0] for f in fragments]

  def sample(self, words: Sequence[str], k: int | None = None,
             rng: np.random.Generator | None = None) -> list[Tree]:
    """k output trees drawn independently from the posterior (with repeats)."""
    codes, derivations = self.sample_derivations(words, k or self.k, rng)
    outputs = [self.grammar.to_output_tree(d) for d in derivations]
    return [outputs[c] for c in codes.tolist()]

  def proposals(self, sentence_words: Sequence[str]) -> list[Tree]:
    words = tuple(sentence_words)
    cached = self._cache.get(words)
    if cached is None:
      try:
        codes, derivations = self.sample_derivations(words, self.k)
        _, first = np.unique(codes, return_index=True)
        order = np.argsort(first, kind="stable")
        out = (self.grammar.to_output_tree(derivations[c]) for c in order.tolist())
        cached = list(dict.fromkeys(out))
      except NoProposals as e:
        cached = str(e)
      if len(self._cache) < self.cache_size:
        self._cache[words] = cached
    if isinstance(cached, str):
      raise NoProposals(cached)
    return list(cached)


def exact_enumeration(words: Sequence[str], grammar: Pcfg | None = None,
                      max_derivations: int = 200_000) -> tuple[dict[Tree, float], float]:
  """Brute force (short sentences only): every derivation of `words` with the original n-ary
  rules. Returns (posterior over output trees, total probability p(words)). An oracle for
  `GrammarPosterior`, independent of its binarization and chart."""
  grammar = grammar or default_grammar()
  words = tuple(words)
  memo: dict[tuple[str, int, int], list[tuple[Tree, float]]] = {}
  lexical = collections.defaultdict(dict)
  for r in grammar.lexical_rules:
    lexical[r.lhs][r.word] = r.prob

  def derive(symbol: str, i: int, j: int) -> list[tuple[Tree, float]]:
    key = (symbol, i, j)
    if key in memo:
      return memo[key]
    out: list[tuple[Tree, float]] = []
    if grammar.kinds[symbol] == LEXICAL:
      p = lexical[symbol].get(words[i]) if j == i + 1 else None
      if p:
        out.append((Tree(symbol, (words[i],)), p))
    else:
      for rule in grammar.rules_by_lhs[symbol]:
        for kids, p in sequence(rule.rhs, i, j):
          out.append((Tree(symbol, kids), rule.prob * p))
    if len(out) > max_derivations:
      raise ValueError(f"more than {max_derivations} derivations: sentence too long to enumerate")
    memo[key] = out
    return out

  def sequence(symbols: tuple[str, ...], i: int, j: int) -> Iterable[tuple[tuple, float]]:
    if len(symbols) == 1:
      for tree, p in derive(symbols[0], i, j):
        yield (tree,), p
      return
    for mid in range(i + 1, j - len(symbols) + 2):
      heads = derive(symbols[0], i, mid)
      if not heads:
        continue
      rests = list(sequence(symbols[1:], mid, j))
      for tree, p in heads:
        for kids, q in rests:
          yield (tree,) + kids, p * q

  posterior: dict[Tree, float] = collections.defaultdict(float)
  total = 0.0
  for derivation, p in derive(grammar.start, 0, len(words)):
    posterior[grammar.to_output_tree(derivation)] += p
    total += p
  if total > 0:
    posterior = {t: p / total for t, p in posterior.items()}
  return dict(posterior), total



__all__ = ["GrammarPosterior", "exact_enumeration"]
