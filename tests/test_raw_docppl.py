"""Doc-PPL of a pretrained checkpoint as raw text (`eval.raw_docppl`, SPEC §13): the documents'
detokenized text after the checkpoint's BOS, every token scored (lm-eval's rolling
log-likelihood), equal to plain transformers; windows past the context; and `evaluate
--checkpoint --tasks=docppl` (refused before this change)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from slm_jax import evaluate  # noqa: E402
from slm_jax.corpus.treebank import embedded_corpus  # noqa: E402
from slm_jax.eval.raw_docppl import document_text, raw_doc_ppl, sentence_text, windows  # noqa: E402
from slm_jax.eval.raw_text import RawTextScorer  # noqa: E402
from slm_jax.evaluation.checkpoints import load_checkpoint_run  # noqa: E402
from tests.test_raw_text import checkpoint  # noqa: E402,F401  # the tiny Llama fixture

DOCUMENTS = [[["The", "cats", "did", "n't", "chase", "the", "mice", "."],
              ["``", "Do", "n't", "go", ",", "''", "she", "said", "-LRB-", "twice", "-RRB-", "."]],
             [["A", "hungry", "cat", "meows", "!"]]]


def hf_log_prob(model, ids) -> float:
  """transformers: Σ log p(ids[t] | ids[:t]), t ≥ 1."""
  with torch.no_grad():
    logp = torch.log_softmax(model(torch.tensor([list(ids)])).logits[0].double(), -1)
  return float(sum(logp[t - 1, ids[t]] for t in range(1, len(ids))))


def test_documents_are_detokenized():
  assert sentence_text(DOCUMENTS[0][0]) == "The cats didn't chase the mice."
  assert sentence_text(DOCUMENTS[0][1]) == "\"Don't go,\" she said (twice)."
  assert document_text(DOCUMENTS[0]) == ("The cats didn't chase the mice. "
                                         "\"Don't go,\" she said (twice).")


def test_windows_score_every_token_once():
  ids = np.arange(10, 17)
  assert [w.tolist() for w in windows(ids, 1, None)] == [[1, *range(10, 17)]]
  parts = windows(ids, 1, 4)
  assert [w.tolist() for w in parts] == [[1, 10, 11, 12], [12, 13, 14, 15], [15, 16]]
  assert sum(len(w) - 1 for w in parts) == len(ids)


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
    want.append(sum(hf_log_prob(model, w.tolist())
                    for w in windows(np.asarray(ids), fast.bos_token_id, max_context)))
  np.testing.assert_allclose(result.doc_log_prob, want, atol=1e-4)
  assert result.tokens == tokens and result.doc_tokens.sum() == tokens
  assert math.isclose(result.ppl, math.exp(-sum(want) / tokens), rel_tol=1e-6)
  assert result.truncated_histories == (0 if max_context is None else 2)
  words = sum(len(s) for d in DOCUMENTS for s in d)
  assert measured["words"] == words
  assert math.isclose(measured["word_ppl"], math.exp(-sum(want) / words), rel_tol=1e-6)


def test_evaluate_scores_docppl_for_a_checkpoint(checkpoint, tmp_path):
  model, fast, folder = checkpoint
  out = tmp_path / "out"
  assert evaluate.main([f"--checkpoint={folder}", "--tasks=docppl", "--max_items=2",
                        f"--out={out}", "--bootstrap_resamples=10"]) == 0
  (entry,) = json.loads((out / "results.json").read_text())["models"]
  documents = embedded_corpus("test", 2, 0)  # no --workdir: the embedded split of seed 0
  context = load_checkpoint_run(folder).cfg.data.seq_len  # its max_position_embeddings
  assert entry["docppl"]["max_context"] == context == model.config.max_position_embeddings
  want = sum(hf_log_prob(model, w.tolist()) for d in documents
             for w in windows(np.asarray(fast(document_text(d), add_special_tokens=False)
                                         .input_ids), fast.bos_token_id, context))
  assert entry["docppl"]["scoring"] == "raw text"
  assert math.isclose(entry["docppl"]["log_prob"], want, abs_tol=1e-3)
