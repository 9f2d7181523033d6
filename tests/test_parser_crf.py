"""The tree CRF (`slm_jax.parser.crf`) against brute-force enumeration of every binary tree."""

from __future__ import annotations

import collections
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from slm_jax.parser import crf


def bracketings(i: int, j: int) -> list[tuple[tuple[int, int], ...]]:
  """Every binary bracketing of words i..j as its 2(j − i) − 1 spans (the oracle)."""
  if j - i == 1:
    return [((i, j),)]
  return [((i, j),) + left + right for k in range(i + 1, j)
          for left in bracketings(i, k) for right in bracketings(k, j)]


def brute_force(scores_FFL: np.ndarray, n: int):
  """(log Z, span marginals p(i, j, ℓ), best labelled score) by enumerating trees and labels'
  per-span sums (labels are independent given the bracketing; ∅ = label 0 banned at the root)."""
  trees = bracketings(0, n)
  logz_terms, best = [], -np.inf
  marginals = np.zeros_like(scores_FFL, dtype=np.float64)
  per_tree = []
  for tree in trees:
    total, top = 0.0, 0.0
    for i, j in tree:
      row = scores_FFL[i, j].astype(np.float64).copy()
      if (i, j) == (0, n):
        row[0] = -np.inf
      total += np.logaddexp.reduce(row)
      top += row.max()
    per_tree.append(total)
    best = max(best, top)
  logz = np.logaddexp.reduce(per_tree)
  for tree, total in zip(trees, per_tree):
    weight = np.exp(total - logz)
    for i, j in tree:
      row = scores_FFL[i, j].astype(np.float64).copy()
      if (i, j) == (0, n):
        row[0] = -np.inf
      marginals[i, j] += weight * np.exp(row - np.logaddexp.reduce(row))
  return logz, marginals, best, trees, np.array(per_tree)


@functools.lru_cache(maxsize=None)
def random_case(seed: int, lengths: tuple[int, ...], N: int = 6, L: int = 3):
  rng = np.random.default_rng(seed)
  return rng.normal(size=(len(lengths), N + 1, N + 1, L)).astype(np.float32) * 1.5


@pytest.mark.parametrize("lengths", [(1, 2, 3), (4, 5, 6), (6, 1, 4)])
def test_inside_and_marginals_match_enumeration(lengths):
  scores = random_case(0, lengths)
  lengths_B = jnp.asarray(lengths)
  logz_B = np.asarray(crf.log_partition(jnp.asarray(scores), lengths_B))
  marginals_BFFL = np.asarray(crf.span_marginals(jnp.asarray(scores), lengths_B))
  for b, n in enumerate(lengths):
    logz, marginals, _, _, _ = brute_force(scores[b], n)
    assert logz_B[b] == pytest.approx(logz, abs=1e-4)
    np.testing.assert_allclose(marginals_BFFL[b], marginals, atol=1e-5)


@pytest.mark.parametrize("lengths", [(1, 2, 3), (6, 5, 4)])
def test_viterbi_is_the_best_enumerated_tree(lengths):
  scores = random_case(1, lengths)
  spans_BP3, valid_BP, score_B = jax.device_get(crf.viterbi(jnp.asarray(scores),
                                                            jnp.asarray(lengths)))
  for b, n in enumerate(lengths):
    _, _, best, trees, _ = brute_force(scores[b], n)
    assert score_B[b] == pytest.approx(best, abs=1e-4)
    rows = spans_BP3[b][valid_BP[b]]
    assert len(rows) == 2 * n - 1
    assert tuple(sorted(map(tuple, rows[:, :2].tolist()))) in {tuple(sorted(t)) for t in trees}
    assert rows[(rows[:, 0] == 0) & (rows[:, 1] == n), 2] != 0  # the root is labelled
    picked = sum(scores[b, i, j, label] for i, j, label in rows)
    assert picked == pytest.approx(score_B[b], abs=1e-4)


def test_samples_follow_the_crf_distribution():
  n, draws = 4, 20000
  scores = random_case(2, (n,), N=n, L=3)
  spans, valid, score_BS, logz_B = jax.device_get(
      crf.sample(jnp.asarray(scores), jnp.asarray([n]), jax.random.key(7), num_samples=draws))
  _, marginals, _, trees, per_tree = brute_force(scores[0], n)
  assert logz_B[0] == pytest.approx(np.logaddexp.reduce(per_tree), abs=1e-4)
  index = {tuple(sorted(t)): k for k, t in enumerate(trees)}
  counts = np.zeros(len(trees))
  labels_at_root = collections.Counter()
  for s in range(draws):
    rows = spans[0, s][valid[0, s]]
    counts[index[tuple(sorted(map(tuple, rows[:, :2].tolist())))]] += 1
    labels_at_root[int(rows[(rows[:, 0] == 0) & (rows[:, 1] == n), 2][0])] += 1
    if s < 50:  # the returned score is the labelled tree's
      assert score_BS[0, s] == pytest.approx(sum(scores[0, i, j, l] for i, j, l in rows),
                                             abs=1e-4)
  expected = np.exp(per_tree - np.logaddexp.reduce(per_tree)) * draws
  assert stats.chisquare(counts, expected).pvalue > 1e-3
  root = np.array([labels_at_root[1], labels_at_root[2]])
  expected_root = marginals[0, n, 1:] * draws
  assert labels_at_root[0] == 0
  assert stats.chisquare(root, expected_root).pvalue > 1e-3


def test_samples_are_not_uniform_when_scores_are_peaked():
  """The chi-square test above can fail: a sampler ignoring the scores would be caught here."""
  n = 4
  scores = np.zeros((1, n + 1, n + 1, 2), np.float32)
  scores[0, 1, 4, :] = 5.0  # strongly prefer the span (1, 4)
  spans, valid, _, _ = jax.device_get(
      crf.sample(jnp.asarray(scores), jnp.asarray([n]), jax.random.key(0), num_samples=500))
  with_span = sum(any((r[0], r[1]) == (1, 4) for r in spans[0, s][valid[0, s]])
                  for s in range(500))
  assert with_span > 450


def test_batched_equals_one_at_a_time():
  lengths = (6, 2, 5, 1, 3)
  scores = random_case(3, lengths)
  logz_B = np.asarray(crf.log_partition(jnp.asarray(scores), jnp.asarray(lengths)))
  best = jax.device_get(crf.viterbi(jnp.asarray(scores), jnp.asarray(lengths)))
  for b, n in enumerate(lengths):
    # Alone in a batch of one: at the same padded size, and (length 5) at its own size.
    for alone in [scores[b:b + 1]] + ([scores[b:b + 1, :n + 1, :n + 1]] if n == 5 else []):
      one = np.asarray(crf.log_partition(jnp.asarray(alone), jnp.asarray([n])))
      assert logz_B[b] == pytest.approx(one[0], abs=1e-5)
      spans, valid, score = jax.device_get(crf.viterbi(jnp.asarray(alone), jnp.asarray([n])))
      assert score[0] == pytest.approx(best[2][b], abs=1e-5)
      assert sorted(map(tuple, spans[0][valid[0]].tolist())) == sorted(
          map(tuple, best[0][b][best[1][b]].tolist()))


def test_nll_of_gold_tree_is_minus_its_log_probability():
  n = 5
  scores = random_case(4, (n,), N=n)
  rows = np.array([(0, 5, 1), (0, 1, 0), (1, 5, 2), (1, 2, 0), (2, 5, 0), (2, 3, 1), (3, 5, 2),
                   (3, 4, 0), (4, 5, 0)], np.int32)
  logz, _, _, _, _ = brute_force(scores[0], n)
  nll = crf.nll(jnp.asarray(scores), jnp.asarray([n]), jnp.asarray(rows[None]),
                jnp.ones((1, len(rows)), bool))
  expected = logz - sum(float(scores[0, i, j, l]) for i, j, l in rows)
  assert float(nll[0]) == pytest.approx(expected, abs=1e-4)
  assert float(nll[0]) > 0


def test_enumeration_oracle_counts_catalan_trees():
  catalan = [1, 1, 2, 5, 14, 42]
  for n in range(1, 7):
    trees = bracketings(0, n)
    assert len(trees) == catalan[n - 1]
    assert all(len(t) == 2 * n - 1 for t in trees)
    assert len(set(map(frozenset, trees))) == len(trees)


def tiny_parser(seed: int = 0):
  from flax import nnx
  from slm_jax.parser.api import Parser
  from slm_jax.parser.config import named_config
  from slm_jax.parser.labels import LabelVocab
  from slm_jax.parser.model import SpanScorer
  from slm_jax.parser.vocab import Vocab
  vocab = Vocab.from_sentences([["the", "cat", "sat", "on", "a", "mat", "."]], min_count=1)
  labels = LabelVocab(("∅", "NP", "VP", "S", "PP", "S+VP"))
  model = SpanScorer(named_config("tiny").model, len(vocab.words), len(vocab.chars), len(labels),
                     nnx.Rngs(seed))
  return Parser(model, vocab, labels)


def test_proposals_are_distinct_sorted_and_normalized():
  from slm_jax.ptb import normalize_tree
  parser = tiny_parser()
  words = ["the", "cat", "sat", "on", "a", "mat", "."]
  sentences = [words, words[:3]]
  props = parser.proposals_batch(sentences, k=40, seed=1)
  best = parser.parse(sentences)
  for sentence, found, viterbi in zip(sentences, props, best):
    trees = [p.tree for p in found]
    assert 1 <= len(trees) <= 40
    assert len(set(trees)) == len(trees)
    assert all(t.leaves() == sentence for t in trees)
    assert all(normalize_tree(t) == t for t in trees)
    logprobs = [p.logprob for p in found]
    assert logprobs == sorted(logprobs, reverse=True)
    assert all(lp <= 1e-5 for lp in logprobs)
    assert trees[0] == viterbi  # the Viterbi tree is the best proposal
  assert len(props[0]) == 40  # a random model spreads its mass: 40 distinct trees are found
  assert parser.proposals_batch(sentences, k=40, seed=1) == props  # seeded
