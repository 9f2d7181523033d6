"""Doc-PPL of a pretrained checkpoint on raw text (SPEC §13; lm-evaluation-harness's
`loglikelihood_rolling`).

A document (sentences as trees or PTB word lists) is scored as its text (`document_text`): each
sentence's words PTB-unescaped (`tokenizer_bases.ptb_unescape`; `` `` `` and `''` are left to the
detokenizer, which turns them into attached `"`) and detokenized by NLTK's
`TreebankWordDetokenizer` — the inverse of the Treebank word split `slm_jax.splitting` applies:
`do n't` → `don't`, no space before punctuation —, the sentences joined by one space. The text
is tokenized in one piece by the checkpoint's own tokenizer (no special tokens added) and scored
after the prefix token (`raw_text.prefix_id`), every token scored, no EOS added. A document longer
than the context (`max_context` tokens, the prefix included) is scored in disjoint windows of
`max_context` tokens: the first after the prefix, each later one conditioned on the last token of
the window before it (lm-eval's rolling windows with context length 1); such documents are
counted (`truncated_histories`).

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


def windows(ids_T: np.ndarray, prefix_id: int, max_context: int | None) -> list[np.ndarray]:
  """The scored inputs of one document's ids: [prefix, ids…] if it fits in `max_context`, else
  disjoint windows of `max_context` tokens, each later one led by its predecessor's last token
  (its first position is context: every other token is scored exactly once)."""
  ids_T = np.asarray(ids_T, np.int64)
  if max_context is None or len(ids_T) + 1 <= max_context:
    return [np.r_[prefix_id, ids_T]]
  if max_context < 2:
    raise ValueError(f"max_context={max_context}: a window needs room for a context token and "
                     "a scored one")
  step = max_context - 1
  return [np.r_[prefix_id if start == 0 else ids_T[start - 1], ids_T[start:start + step]]
          for start in range(0, len(ids_T), step)]


def raw_doc_ppl(scorer: RawTextScorer, documents: Sequence[Sequence[Tree | Sequence[str]]], *,
                max_context: int | None = None) -> tuple[DocPPLResult, dict]:
  """(doc-PPL of `documents` as raw text, what else it measured: word-level PPL, bits per byte,
  words and characters) — module docstring."""
  if any(not doc for doc in documents):
    raise ValueError("doc_ppl: a document has no sentences")
  texts = [document_text(doc) for doc in documents]
  inputs, owner = [], []
  truncated = 0
  for d, text in enumerate(texts):
    ids_T, _ = scorer.encode(text, leading="")
    if not len(ids_T):
      raise ValueError(f"document {d} has no tokens to score")
    parts = windows(ids_T, scorer.prefix_id, max_context)
    truncated += len(parts) > 1
    inputs += parts
    owner += [d] * len(parts)
  scored = scorer.text_scorer.score(inputs)
  owner_arr = np.asarray(owner)
  doc_lp = np.bincount(owner_arr, weights=[s.logprobs.sum() for s in scored],
                       minlength=len(texts))
  doc_tokens = np.bincount(owner_arr, weights=[len(s.logprobs) for s in scored],
                           minlength=len(texts)).astype(np.int64)
  total, tokens = float(doc_lp.sum()), int(doc_tokens.sum())
  result = DocPPLResult(ppl=math.exp(-total / tokens), log_prob=total, tokens=tokens,
                        documents=len(texts), sentences=sum(len(doc) for doc in documents),
                        doc_log_prob=doc_lp, doc_tokens=doc_tokens, truncated_histories=truncated)
  words = sum(len(sentence_words(s)) for doc in documents for s in doc)
  size = sum(len(t.encode("utf-8")) for t in texts)
  extra = {"scoring": "raw text", "words": words, "characters": sum(map(len, texts)),
           "word_ppl": math.exp(-total / words), "bits_per_byte": -total / math.log(2) / size}
  return result, extra
