"""`inference.text_scorer.TextScorer`: the model reads all tokens but the last (a sequence of n + 1
tokens fills a row of width n, e.g. lm-eval's rolling window of `max_length` inputs), and the
log-probs equal those of the full read (`topk`, which needs every position) and transformers'."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from slm_jax.evaluation.checkpoints import load_checkpoint_run  # noqa: E402
from slm_jax.inference.text_scorer import TextScorer  # noqa: E402
from tests.test_raw_text import checkpoint  # noqa: E402,F401  # the tiny Llama fixture

SEQUENCES = [[1], [1, 40], list(range(1, 18)), list(range(30, 55))]  # 17 tokens: a 16-wide row


def test_model_reads_all_but_the_last_token(checkpoint):
  model, _, folder = checkpoint
  scorer = TextScorer(load_checkpoint_run(folder).model, batch_size=1)
  widths = []
  run = scorer._run  # pylint: disable=protected-access

  def spy(params, tokens_BT, targets_BT, meta, topk):
    widths.append(tokens_BT.shape[1])
    return run(params, tokens_BT, targets_BT, meta, topk)

  scorer._run = spy  # pylint: disable=protected-access
  read = scorer.score(SEQUENCES)
  assert widths == [16, 16, 16, 24]  # buckets of 1, 1, 16 and 24 tokens read
  full = scorer.score(SEQUENCES, topk=2)
  assert widths[4:] == [16, 16, 24, 32]  # with topk every token is read
  for ids, a, b in zip(SEQUENCES, read, full):
    assert len(a.logprobs) == len(ids) - 1
    np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)
    with torch.no_grad():
      logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), -1)
    want = logp[torch.arange(len(ids) - 1), torch.tensor(ids[1:], dtype=torch.long)].numpy()
    np.testing.assert_allclose(a.logprobs, want, atol=1e-4)
