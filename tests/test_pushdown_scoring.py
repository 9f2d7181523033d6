"""PushdownScorer: the evaluators' terminal-model calls get attachment-marginalized log-probs."""

from __future__ import annotations

import pytest

from slm_jax.configurations import CONFIGURATIONS
from slm_jax.pushdown.inference import exhaustive_score
from slm_jax.pushdown.scoring import PushdownScorer, scoring_configuration
from slm_jax.tokenizer import make_tokenizer
from tests.test_pushdown_model import tiny_model

WORDS = "the cat sat on a mat dogs bark".split()


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
