"""PushdownScorer: the evaluators' terminal-model calls get attachment-marginalized log-probs;
PushdownTeacherScorer: lin1 sequences scored under the structure their trees supply."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from slm_jax import ptb
from slm_jax.configurations import CONFIGURATIONS
from slm_jax.data.encode import encode_document
from slm_jax.downstream.encoding import TextEncoder, make_tree_source
from slm_jax.downstream.prompts import Prompt
from slm_jax.downstream.scoring import continuation_scores
from slm_jax.kinds import Kind
from slm_jax.pushdown.beam import exhaustive_score
from slm_jax.pushdown.scoring import PushdownScorer, PushdownTeacherScorer, scoring_configuration
from slm_jax.pushdown.stack import oracle_document
from slm_jax.structure import row_metadata
from slm_jax.tokenizer import make_tokenizer
from tests.test_pushdown_model import tiny_model

WORDS = "the cat sat on a mat dogs bark .".split()


@pytest.fixture(scope="module")
def scorer():
  tokenizer = make_tokenizer("word", words=WORDS)
  model = tiny_model(seed=1, n_layers=1, vocab_size=tokenizer.vocab_size)
  model.depth_embed[...] = model.depth_embed[...] * 30
  return PushdownScorer(model, tokenizer, scoring_configuration(CONFIGURATIONS["pushdown"]),
                        beam=300)


@pytest.mark.slow  # ~25 s on 2 busy cores: a compilation per beam row bucket
def test_sentence_and_word_log_probs_marginalize_the_attachments(scorer):
  sentences = [["the", "cat"], ["dogs", "bark", "on"]]
  totals = scorer.terminal_logprobs(sentences)
  for words, total in zip(sentences, totals):
    sequence = scorer.terminal_sequence([words])
    exact = exhaustive_score(scorer.model, sequence.tokens, sequence.kinds, sequence.sentence)
    assert total == pytest.approx(exact, abs=1e-4)  # beam 300 covers every attachment sequence
  per_word = scorer.terminal_word_logprobs(sentences)
  assert [len(w) for w in per_word] == [2, 3] and all((w < 0).all() for w in per_word)
  # A document of two sentences: the second sentence's words never reduce into the first.
  document = scorer.terminal_sequence(sentences)
  exact = exhaustive_score(scorer.model, document.tokens, document.kinds, document.sentence)
  assert scorer.terminal_logprob(sentences) == pytest.approx(exact, abs=1e-4)


def test_scoring_configuration_is_the_terminal_view():
  conf = scoring_configuration(CONFIGURATIONS["pushdown"])
  assert conf.linearization == "lin0" and conf.reference == "pushdown"
  assert not conf.scheme.scored_with_structure
  with pytest.raises(ValueError, match="not a Pushdown run"):
    scoring_configuration(CONFIGURATIONS["tree"])


TREE = "(S (NP the cat) (VP sat (PP on (NP a mat))))"
OTHER = "(S (NP the cat sat) (PP on a) mat)"  # same words, another structure


def _direct(model, sequence, tree: str) -> np.ndarray:
  """log p of each compact token (BOS, words, EOS) by `model.forward` under the loop oracle's
  stack tape of `tree` (no vectorized structure code)."""
  kinds = np.asarray(sequence.kinds)
  keep = np.isin(kinds, (Kind.BOS, Kind.TERMINAL, Kind.EOS))
  tokens, compact = np.asarray(sequence.tokens)[keep], kinds[keep]
  _, tape = oracle_document(ptb.parse_trees(tree))
  logits, _ = model.forward(jnp.asarray(tokens)[None],
                            row_metadata(compact[None], np.ones((1, len(tokens)), np.int32)),
                            jnp.asarray(tape)[None])
  logp = np.asarray(jax.nn.log_softmax(logits[0, :-1], axis=-1))
  return logp[np.arange(len(tokens) - 1), tokens[1:]]


def test_the_teacher_forced_scorer_reads_the_supplied_structure(scorer):
  teacher = PushdownTeacherScorer(scorer.model, scorer.tokenizer, CONFIGURATIONS["pushdown"],
                                  batch_size=2)
  sequences = [encode_document(ptb.parse_trees(t), scorer.tokenizer, "lin1")
               for t in (TREE, OTHER)]
  got = teacher.logprobs(sequences + sequences[:1])  # three rows: two batches, bucketed
  for sequence, lp, tree in zip(sequences, got, (TREE, OTHER)):
    kinds = np.asarray(sequence.kinds)[1:]
    scored = np.isin(kinds, (Kind.TERMINAL, Kind.EOS))
    np.testing.assert_allclose(lp[scored], _direct(scorer.model, sequence, tree), atol=1e-5)
    assert (lp[~scored] == 0).all() and (lp[scored] < 0).all()  # structure: given, not scored
    assert teacher.score([sequence])[0] == pytest.approx(lp[scored].sum(), abs=1e-6)
  np.testing.assert_array_equal(got[2], got[0])  # batching changes nothing
  one, two = (lp[np.isin(np.asarray(s.kinds)[1:], (Kind.TERMINAL, Kind.EOS))]
              for s, lp in zip(sequences, got))
  assert np.abs(one - two).max() > 1e-3  # another tree, other word log-probs
  assert one[0] == pytest.approx(two[0], abs=1e-6)  # the first word sees no structure yet
  with pytest.raises(ValueError, match="own lin1 sequences"):
    PushdownTeacherScorer(scorer.model, scorer.tokenizer, scorer.configuration)
  with pytest.raises(NotImplementedError, match="PushdownScorer"):
    teacher.terminal_logprobs([["the", "cat"]])


def test_the_teacher_forced_scorer_gives_s_full_and_s_term_of_the_terminals(scorer):
  teacher = PushdownTeacherScorer(scorer.model, scorer.tokenizer, CONFIGURATIONS["pushdown"])
  encoder = TextEncoder(teacher.tokenizer, teacher.configuration, make_tree_source("flat"))
  prompts = [Prompt(("the cat sat on a mat .",), ("question",), " dogs bark", 0),
             Prompt(("the cat sat on a mat .",), ("question",), " the mat", 1)]
  scores = continuation_scores(teacher, encoder, prompts)
  for score in scores:
    assert score.full == pytest.approx(score.term) and score.term < 0 and score.terminals == 2
