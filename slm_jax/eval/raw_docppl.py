"""Doc-PPL of a pretrained checkpoint on raw text (SPEC §13; lm-evaluation-harness's
`loglikelihood_rolling`).

A document (sentences as trees or PTB word lists) is scored as its text (`document_text`): each
sentence's words PTB-unescaped (`tokenizer_bases.ptb_unescape`; `` `` `` and `''` are left to the
detokenizer, which turns them into attached `"`) and detokenized by NLTK's
`TreebankWordDetokenizer` — the inverse of the Treebank word split `slm_jax.splitting` applies:
`do n't` → `don't`, no space before punctuation —, the sentences joined by one space. The text
is tokenized in one piece by the checkpoint's own tokenizer (no special tokens added) and scored
after the prefix token (`raw_text.prefix_id`), every token scored, no EOS added. A document longer
than the context is scored as lm-evaluation-harness's `loglikelihood_rolling` scores it
(`lm_eval.utils.get_rolling_token_windows(ids, prefix, max_length, context_len=1)`, each window
made disjoint by `make_disjoint_window`; here `rolling_windows`). With L = `max_context` (lm-eval's
`max_length`: the tokens the model reads per window), the first window predicts ids[:L] after
the prefix (reading the prefix and ids[:L−1]); every later one predicts the next L ids — the
last, partial one what is left — reading the L ids before its last, so the partial window too
gets a full-length context. Each token is scored exactly once; documents of more than L tokens
are counted (`truncated_histories`).

PPL = exp(−Σ log p / M), M = the scored tokens: the checkpoint's own tokens, so comparable only
between models sharing its tokenizer. For comparisons across tokenizers the result also gives
the word-level perplexity (M = the documents' PTB words) and lm-eval's bits per byte (UTF-8 bytes
of the text).
"""

from __future__ import annotations

import functools
import math
from typing import Sequence

import numpy as np

from slm_jax.eval.docppl import DocPPLResult, sentence_words
from slm_jax.eval.raw_text import RawTextScorer
from slm_jax.tokenizer_bases import ptb_unescape
from slm_jax.trees import Tree

QUOTES = ("``", "''")  # PTB quotes: the detokenizer attaches them as `"`


@functools.cache
def _detokenizer():
  from nltk.tokenize.treebank import TreebankWordDetokenizer  # pylint: disable=g-import-not-at-top
  return TreebankWordDetokenizer()


def sentence_text(words: Sequence[str]) -> str:
  """One sentence of PTB words as written text (module docstring)."""
  return _detokenizer().detokenize([w if w in QUOTES else ptb_unescape(w) for w in words])


def document_text(document: Sequence[Tree | Sequence[str]]) -> str:
  """A document's sentences as one text, joined by one space."""
  return " ".join(sentence_text(sentence_words(s)) for s in document)


def rolling_windows(tokens: int, max_length: int | None) -> tuple[np.ndarray, ...]:
  """lm-eval's rolling windows of a document of `tokens` ids as slices of [prefix, ids…]
  (module docstring): (start_W, stop_W, scored_W) — window w is the sequence
  [prefix, ids…][start:stop], its last `scored` tokens predicted; the tokens before them are
  its context (lm-eval's disjoint context: the prefix alone in the first window, the
  `max_length` + 1 − scored ids in a later one). No cap: one window."""
  if tokens < 1:
    raise ValueError(f"a document of {tokens} tokens has nothing to score")
  if max_length is None:
    return np.array([0]), np.array([tokens + 1]), np.array([tokens])
  if max_length < 1:
    raise ValueError(f"max_context={max_length}: a window needs room for one token")
  window_W = np.arange(-(-tokens // max_length))
  end_W = np.minimum((window_W + 1) * max_length, tokens)  # in ids: the window predicts ..end
  stop_W = end_W + 1  # in [prefix, ids…]
  return np.maximum(stop_W - max_length - 1, 0), stop_W, end_W - window_W * max_length


def windows(ids_T: np.ndarray, prefix_id: int, max_context: int | None
            ) -> tuple[list[np.ndarray], np.ndarray]:
  """(the token sequences of one document's windows, each one's scored count: its last tokens)
  — `rolling_windows` applied to [prefix, ids…]."""
  sequence_S = np.r_[prefix_id, np.asarray(ids_T, np.int64)]
  start_W, stop_W, scored_W = rolling_windows(len(sequence_S) - 1, max_context)
  return [sequence_S[a:b] for a, b in zip(start_W, stop_W)], scored_W


def raw_doc_ppl(scorer: RawTextScorer, documents: Sequence[Sequence[Tree | Sequence[str]]], *,
                max_context: int | None = None) -> tuple[DocPPLResult, dict]:
  """(doc-PPL of `documents` as raw text, what else it measured: word-level PPL, bits per byte,
  words and characters) — module docstring."""
  if any(not doc for doc in documents):
    raise ValueError("doc_ppl: a document has no sentences")
  texts = [document_text(doc) for doc in documents]
  inputs, scored_counts, owner = [], [], []
  for d, text in enumerate(texts):
    ids_T, _ = scorer.encode(text, leading="")
    if not len(ids_T):
      raise ValueError(f"document {d} has no tokens to score")
    parts, scored_W = windows(ids_T, scorer.prefix_id, max_context)
    inputs += parts
    scored_counts.append(scored_W)
    owner += [d] * len(parts)
  scored_W = np.concatenate(scored_counts)
  window_lp = [s.logprobs[len(s.logprobs) - n:].sum()
               for s, n in zip(scorer.text_scorer.score(inputs), scored_W)]
  owner_W = np.asarray(owner)
  doc_lp = np.bincount(owner_W, weights=window_lp, minlength=len(texts))
  doc_tokens = np.bincount(owner_W, weights=scored_W, minlength=len(texts)).astype(np.int64)
  truncated = int((np.bincount(owner_W, minlength=len(texts)) > 1).sum())
  total, tokens = float(doc_lp.sum()), int(doc_tokens.sum())
  result = DocPPLResult(ppl=math.exp(-total / tokens), log_prob=total, tokens=tokens,
                        documents=len(texts), sentences=sum(len(doc) for doc in documents),
                        doc_log_prob=doc_lp, doc_tokens=doc_tokens, truncated_histories=truncated)
  words = sum(len(sentence_words(s)) for doc in documents for s in doc)
  size = sum(len(t.encode("utf-8")) for t in texts)
  extra = {"scoring": "raw text", "words": words, "characters": sum(map(len, texts)),
           "word_ppl": math.exp(-total / words), "bits_per_byte": -total / math.log(2) / size}
  return result, extra
