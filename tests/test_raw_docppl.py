"""Doc-PPL of a pretrained checkpoint as raw text (`eval.raw_docppl`, SPEC §13): the documents'
detokenized text after the checkpoint's BOS, every token scored (lm-eval's rolling
log-likelihood), equal to plain transformers; windows past the context exactly as lm-eval's
`get_rolling_token_windows` + `make_disjoint_window` cut them (an independent transcription
below, `lm_eval_windows`); and `evaluate --checkpoint --tasks=docppl`."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from slm_jax import evaluate  # noqa: E402
from slm_jax.corpus.treebank import embedded_corpus  # noqa: E402
from slm_jax.eval.raw_docppl import (document_text, raw_doc_ppl, rolling_windows,  # noqa: E402
                                     sentence_text, windows)
from slm_jax.eval.raw_text import RawTextScorer  # noqa: E402
from slm_jax.evaluation.checkpoints import load_checkpoint_run  # noqa: E402
from tests.test_raw_text import checkpoint  # noqa: E402,F401  # the tiny Llama fixture

DOCUMENTS = [[["The", "cats", "did", "n't", "chase", "the", "mice", "."],
              ["``", "Do", "n't", "go", ",", "''", "she", "said", "-LRB-", "twice", "-RRB-", "."]],
             [["A", "hungry", "cat", "meows", "!"]]]


def lm_eval_windows(token_list: list[int], prefix_token: int, max_seq_len: int
                    ) -> list[tuple[list[int], list[int]]]:
  """lm-eval 0.4's rolling windows with context_len=1, made disjoint: (context, continuation)
  pairs, transcribed from `lm_eval.utils.get_rolling_token_windows` / `make_disjoint_window`."""
  pairs = []
  predicted = 0
  first_seq_len = min(max_seq_len, len(token_list))
  pairs.append(([prefix_token] + token_list[:first_seq_len - 1], token_list[:first_seq_len]))
  predicted += first_seq_len
  while predicted < len(token_list):
    window_pred_len = min(len(token_list) - predicted, max_seq_len)  # pred_len = max_seq_len
    window_end = predicted + window_pred_len
    pairs.append((token_list[window_end - max_seq_len - 1:window_end - 1],
                  token_list[window_end - window_pred_len:window_end]))
    predicted += window_pred_len
  return [(a[:len(a) - (len(b) - 1)], b) for a, b in pairs]  # make_disjoint_window


def hf_log_prob(model, ids, scored: int | None = None) -> float:
  """transformers: Σ log p(ids[t] | ids[:t]) over the last `scored` tokens (all but the first)."""
  with torch.no_grad():
    logp = torch.log_softmax(model(torch.tensor([list(ids)])).logits[0].double(), -1)
  first = 1 if scored is None else len(ids) - scored
  return float(sum(logp[t - 1, ids[t]] for t in range(first, len(ids))))


def hf_rolling_log_prob(model, ids: list[int], prefix: int, max_length: int | None) -> float:
  """lm-eval's `loglikelihood_rolling` with transformers as the model: each window's
  continuation scored after its context."""
  if max_length is None:
    return hf_log_prob(model, [prefix, *ids])
  return sum(hf_log_prob(model, context + continuation, len(continuation))
             for context, continuation in lm_eval_windows(ids, prefix, max_length))


def test_documents_are_detokenized():
  assert sentence_text(DOCUMENTS[0][0]) == "The cats didn't chase the mice."
  assert sentence_text(DOCUMENTS[0][1]) == "\"Don't go,\" she said (twice)."
  assert document_text(DOCUMENTS[0]) == ("The cats didn't chase the mice. "
                                         "\"Don't go,\" she said (twice).")


def test_windows_are_lm_evals_rolling_windows():
  ids = list(range(10, 20))  # 10 tokens, max_length 4: 4 + 4 + a partial window of 2
  parts, scored = windows(np.array(ids), 1, 4)
  assert [w.tolist() for w in parts] == [[1, 10, 11, 12, 13], [13, 14, 15, 16, 17],
                                         [15, 16, 17, 18, 19]]
  assert scored.tolist() == [4, 4, 2]  # the partial window: 2 scored after 3 context tokens
  for max_length in (1, 2, 3, 4, 5, 7):
    for length in (1, 2, max_length - 1, max_length, max_length + 1, 2 * max_length,
                   2 * max_length + 1, 3 * max_length + 2):
      if length < 1:
        continue
      ids = list(range(100, 100 + length))
      want = lm_eval_windows(ids, 7, max_length)
      parts, scored = windows(np.array(ids), 7, max_length)
      assert [w.tolist() for w in parts] == [c + t for c, t in want], (max_length, length)
      assert scored.tolist() == [len(t) for _, t in want], (max_length, length)
      assert all(len(w) <= max_length + 1 for w in parts)  # the model reads ≤ max_length
      assert scored.sum() == length  # every token once
  parts, scored = windows(np.array(ids), 7, None)  # no cap: one sequence
  assert [w.tolist() for w in parts] == [[7, *ids]] and scored.tolist() == [len(ids)]


def test_rolling_windows_refuse_what_cannot_be_windowed():
  with pytest.raises(ValueError, match="nothing to score"):
    rolling_windows(0, 4)
  with pytest.raises(ValueError, match="max_context=0"):
    rolling_windows(5, 0)


@pytest.mark.parametrize("max_context", [None, 6])
def test_raw_doc_ppl_equals_transformers(checkpoint, max_context):
  model, fast, folder = checkpoint
  run = load_checkpoint_run(folder)
  scorer = RawTextScorer(run.model, run.tokenizer, batch_size=2)
  result, measured = raw_doc_ppl(scorer, DOCUMENTS, max_context=max_context)
  want, tokens = [], 0
  for doc in DOCUMENTS:
    ids = fast(document_text(doc), add_special_tokens=False).input_ids
    tokens += len(ids)
    want.append(hf_rolling_log_prob(model, ids, fast.bos_token_id, max_context))
  np.testing.assert_allclose(result.doc_log_prob, want, atol=1e-4)
  assert result.tokens == tokens and result.doc_tokens.sum() == tokens
  assert math.isclose(result.ppl, math.exp(-sum(want) / tokens), rel_tol=1e-6)
  assert result.truncated_histories == (0 if max_context is None else 2)
  words = sum(len(s) for d in DOCUMENTS for s in d)
  assert measured["words"] == words
  assert math.isclose(measured["word_ppl"], math.exp(-sum(want) / words), rel_tol=1e-6)


@pytest.mark.parametrize("max_context", [None, 16])
def test_evaluate_scores_docppl_for_a_checkpoint(checkpoint, tmp_path, max_context):
  model, fast, folder = checkpoint
  out = tmp_path / "out"
  flags = [] if max_context is None else [f"--max_context={max_context}"]
  assert evaluate.main([f"--checkpoint={folder}", "--tasks=docppl", "--max_items=2",
                        f"--out={out}", "--bootstrap_resamples=10", *flags]) == 0
  (entry,) = json.loads((out / "results.json").read_text())["models"]
  documents = embedded_corpus("test", 2, 0)  # no --workdir: the embedded split of seed 0
  context = max_context or load_checkpoint_run(folder).cfg.data.seq_len  # default: lm-eval's
  assert entry["docppl"]["max_context"] == context  # max_length, max_position_embeddings
  if max_context is None:
    assert context == model.config.max_position_embeddings
  want = sum(hf_rolling_log_prob(model, fast(document_text(d), add_special_tokens=False).input_ids,
                                 fast.bos_token_id, context) for d in documents)
  assert entry["docppl"]["scoring"] == "raw text"
  assert math.isclose(entry["docppl"]["log_prob"], want, abs_tol=1e-3)
  if max_context is not None:  # both documents span several windows
    assert entry["docppl"]["truncated_histories"] == 2
