"""The batched Pushdown attachment beam (`pushdown.beam_batch.beam_score_many`) equals the one-row
beam (`pushdown.beam.beam_score`, the oracle) bit for bit: rows of different lengths and sentence
counts, beams narrower than the attachment sequences (pruning matters), rows finishing at
different steps and refilled from the queue, fewer rows in flight than rows."""

from __future__ import annotations

import numpy as np
import pytest

from slm_jax.configurations import CONFIGURATIONS
from slm_jax.pushdown import cache
from slm_jax.pushdown.beam import attachment_sequences, beam_score, exhaustive_score, replay
from slm_jax.pushdown.beam_batch import _Hypotheses, _push, beam_score_many, in_flight
from slm_jax.pushdown.cache import CHUNK_ROWS
from slm_jax.pushdown.scoring import PushdownScorer, scoring_configuration
from slm_jax.tokenizer import make_tokenizer
from tests.test_pushdown_beam import _row
from tests.test_pushdown_model import tiny_model
from tests.test_pushdown_scoring import WORDS

# Words per sentence of each row: 1–9 words, one to three sentences, widths 8 and 12 (buckets).
ROWS = [[3], [1], [2, 2], [6], [4, 1, 2], [2], [5, 3], [1, 1]]


@pytest.fixture(scope="module")
def model():
  model = tiny_model(seed=5, n_layers=2)
  model.depth_embed[...] = model.depth_embed[...] * 30  # attachments change the word scores
  return model


def rows_of(shapes, seed: int = 0):
  return [_row(sentences, seed=seed + i) for i, sentences in enumerate(shapes)]


def assert_same(one, many) -> None:
  np.testing.assert_array_equal(one.prefix_log_probs, many.prefix_log_probs)
  assert (one.log_prob, one.best, one.hypotheses) == (many.log_prob, many.best,
                                                      many.hypotheses)


@pytest.mark.parametrize("beam, concurrent", [(3, 3), (7, 8), (1, 2)])
def test_batched_equals_one_row_at_a_time(model, beam, concurrent):
  rows = rows_of(ROWS)
  assert sum(len(attachment_sequences(k, s)) > beam for _, k, s in rows) >= 3  # pruned rows
  many = beam_score_many(model, rows, beam=beam, concurrent=concurrent)
  assert len(many) == len(rows)
  for row, result in zip(rows, many):
    assert_same(beam_score(model, *row, beam=beam), result)
  assert len({len(k) for _, k, _ in rows}) > 4  # rows finish at different steps


def test_many_rows_a_step_on_a_wider_model():
  """Steps of several hundred rows (the one-row steps: one chunk) and rows of widths 8, 12 and
  16 on a model wide enough that XLA:CPU's kernels change with the row count and the slot
  count: `cache.step`'s fixed chunks and the search by width keep every row's numbers the same
  bits (either alone fails here)."""
  wide = tiny_model(seed=6, n_layers=2, d_model=256, n_heads=4)
  wide.depth_embed[...] = wide.depth_embed[...] * 30
  rows = rows_of([[7], [6], [5, 3], [4, 4], [3, 3, 2], [8], [12], [6, 5]], seed=11)
  many = beam_score_many(wide, rows, beam=50, concurrent=6)
  assert sum(r.hypotheses for r in many) > 4 * CHUNK_ROWS
  for row, result in zip(rows, many):
    assert_same(beam_score(wide, *row, beam=50), result)


def test_rows_in_flight_fit_the_memory_budget(model, caplog):
  """The rule: `concurrent` rows' hypotheses' cache, twice (a step writes a new one while the
  old one lives), within the budget; never fewer than one row; a reduction says why."""
  one = cache.peak_bytes(model.config, cache.rows_for(7), 16)
  assert one == 2 * 64 * 16 * (2 * 2 * model.config.n_kv_heads * model.config.head_dim
                               + model.config.d_model) * 4  # float32, 2 layers, 64-row chunks
  assert in_flight(model, 7, 16, 8, budget=10 ** 12) == 8
  assert not caplog.records
  # b = 50: 1..8 rows in flight hold 64, 128, 192, 256, 256, 384, 384, 512 cache rows
  fits = in_flight(model, 50, 16, 8, budget=3 * one)
  assert fits == 3 and "pushdown beam rows of 16 slots in flight: 3, not 8" in caplog.text
  assert in_flight(model, 50, 16, 8, budget=4 * one) == 5  # 5 rows fit in 4 × 64 rows too
  assert in_flight(model, 50, 16, 8, budget=1) == 1  # one row even over the budget


def test_a_small_memory_budget_changes_no_number(model):
  rows = rows_of(ROWS)
  wide = beam_score_many(model, rows, beam=7, concurrent=8)
  narrow = beam_score_many(model, rows, beam=7, concurrent=8, memory_budget=1)  # one at a time
  for a, b in zip(wide, narrow):
    assert_same(a, b)


def test_wide_batched_beam_is_exhaustive(model):
  """A beam as wide as every attachment sequence sums them all, in the batch too."""
  rows = rows_of([[3], [2, 2], [1]], seed=7)
  count = max(len(attachment_sequences(k, s)) for _, k, s in rows)
  for row, result in zip(rows, beam_score_many(model, rows, beam=count, concurrent=2)):
    assert result.log_prob == pytest.approx(exhaustive_score(model, *row), abs=1e-4)
    assert result.hypotheses == len(attachment_sequences(*row[1:]))


def test_push_equals_the_stack(model):
  """The array stack of every hypothesis after every attachment sequence of a row is `Stack`'s
  (depths and open elements), so the options and tapes the batch builds are the oracle's."""
  tokens, kinds, sentence = _row([2, 3])
  sequences = attachment_sequences(kinds, sentence)
  W = 8
  hyps = _Hypotheses(W)
  for _ in sequences:
    hyps.append_start(0)
  for e in range(1, len(kinds)):
    option = np.array([a[e] for a in sequences])
    _push(hyps, np.full(len(sequences), e), option == e, option)
    for n, attachments in enumerate(sequences):
      stack = replay(kinds, sentence, attachments[:e + 1], length=W)
      np.testing.assert_array_equal(hyps.depth[n], stack.depth)
      assert sorted(np.flatnonzero(hyps.open[n])) == sorted(last for _, last in stack.elements)
  assert [list(a[:len(kinds)]) for a in hyps.attach] == sequences


def test_the_scorer_runs_the_batched_beam():
  """`PushdownScorer.logprobs` (SG, BLiMP, doc-PPL) is the batched beam: per token the increments
  of the one-row beam's prefix log-probabilities, bit for bit."""
  tokenizer = make_tokenizer("word", words=WORDS)
  model = tiny_model(seed=1, n_layers=1, vocab_size=tokenizer.vocab_size)
  model.depth_embed[...] = model.depth_embed[...] * 30
  scorer = PushdownScorer(model, tokenizer, scoring_configuration(CONFIGURATIONS["pushdown"]),
                          beam=4, sentences_per_batch=2)
  sentences = [["the", "cat", "sat", "on", "a", "mat"], ["dogs", "bark"],
               ["the", "dogs", "sat", "."], ["a", "cat"]]
  sequences = [scorer.terminal_sequence([words]) for words in sentences]
  sequences.append(scorer.terminal_sequence(sentences[:2]))  # a document of two sentences
  for sequence, lp in zip(sequences, scorer.logprobs(sequences)):
    one = beam_score(model, sequence.tokens, sequence.kinds, sequence.sentence, beam=4)
    np.testing.assert_array_equal(lp, np.diff(one.prefix_log_probs))
  with pytest.raises(ValueError, match="sentences_per_batch must be"):
    PushdownScorer(model, tokenizer, scoring_configuration(CONFIGURATIONS["pushdown"]),
                   sentences_per_batch=0)


def test_bad_input_is_named(model):
  rows = rows_of([[2], [1]])
  tokens, kinds, sentence = rows[1]
  with pytest.raises(ValueError, match="row 1: pushdown scoring: a row starts with BOS"):
    beam_score_many(model, [rows[0], (tokens[1:], kinds[1:], sentence[1:])])
  with pytest.raises(ValueError, match="beam must be"):
    beam_score_many(model, rows, beam=0)
  with pytest.raises(ValueError, match="concurrent must be"):
    beam_score_many(model, rows, concurrent=0)
  assert beam_score_many(model, []) == []
