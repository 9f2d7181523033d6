"""Trees → token ids in a configuration's linearization (the per-document step of every loader).

`encode_document` = lin1 traversal → tokenizer (words into pieces, in place) → `derive` for the
scheme. lin1_shuf is keyed by the word-level document content, so the shuffle a model trains on is
the one `explain` shows for the same seed.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence as SequenceT

from slm_jax.linearize import Sequence, base_sequence, derive, document_key, get_scheme
from slm_jax.tokenizer import Tokenizer
from slm_jax.trees import Tree


def encode_document(document: SequenceT[Tree], tokenizer: Tokenizer, linearization: str,
                    seed: int = 0) -> Sequence:
  """Token ids (int32), kinds and sentence index of `document` in `linearization`."""
  return encode_base(base_sequence(document), tokenizer, linearization, seed)


def encode_base(base: Sequence, tokenizer: Tokenizer, linearization: str,
                seed: int = 0) -> Sequence:
  """`encode_document` of the document whose word-level lin1 base is `base` (prepared data
  stores bases). Schemes that drop brackets never tokenize them: the base is cut to the scheme
  table's `tokenize_from` first (by `derive` itself)."""
  facts = get_scheme(linearization)
  doc_key = document_key(base) if facts.shuffled else 0  # keyed by the word-level document
  if facts.tokenize_from != "lin1":
    base = derive(base, facts.tokenize_from)
  ids, _, word_index = tokenizer.encode_symbols(base.symbols(), base.kinds)
  pieces = dataclasses.replace(base.take(word_index), tokens=ids)
  return derive(pieces, linearization, seed=seed, doc_key=doc_key,
                pause_token=tokenizer.pause_id, merged_close_token=tokenizer.merged_close_id)
