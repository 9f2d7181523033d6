"""Packing whole sentences into rows (SPEC §8) and the accounting of what was dropped."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from slm_jax.data.packing import pack_documents, sentence_chunks, stack_rows
from slm_jax.kinds import Kind
from slm_jax.linearize import linearize
from slm_jax.structure import row_metadata
from slm_jax.trees import Tree
from tests.strategies import documents

CATS = Tree("S", ("Cats", Tree("VP", ("chase", "mice"))))  # lin2: 9 tokens
LONG = Tree("S", tuple(f"w{i}" for i in range(30)))


def test_sentence_chunks_attach_bos_and_eos():
  seq = linearize([CATS, CATS], "lin1")
  assert sentence_chunks(seq) == [(0, 8), (8, 16)]


def test_documents_are_cut_between_sentences_and_long_sentences_dropped():
  docs = [linearize([CATS, CATS, CATS], "lin2"), linearize([CATS, LONG, CATS], "lin2")]
  rows, stats = pack_documents(docs, seq_len=25, pad_token="<pad>")
  assert stats.sentences_too_long == 1 and stats.tokens_dropped == 33
  assert stats.documents == 2 and stats.sentences == 6
  assert stats.tokens_packed + stats.tokens_dropped == stats.tokens
  assert stats.rows * 25 == stats.tokens_packed + stats.padding
  for row in rows:
    for seg in set(row.segment.tolist()) - {0}:
      piece = row.kinds[row.segment == seg]
      # a piece ends at a sentence end: its last token closes the root or is EOS
      assert piece[-1] in (Kind.CNT2, Kind.EOS)
  assert stats.documents_split >= 1
  batch = stack_rows(rows)
  assert batch.kinds.shape == (len(rows), 25)


@settings(max_examples=80, deadline=None)
@given(st.lists(documents(max_sentences=4), min_size=1, max_size=5), st.integers(8, 60))
def test_packed_metadata_equals_per_document_metadata(docs, seq_len):
  seqs = [linearize(d, "lin2") for d in docs]
  rows, stats = pack_documents(seqs, seq_len=seq_len, pad_token="<pad>")
  assert stats.tokens_packed + stats.tokens_dropped == stats.tokens
  if not rows:
    return
  batch = stack_rows(rows)
  meta = row_metadata(batch.kinds, batch.segment)
  # A document packed whole into one row has exactly the metadata it has alone.
  for seq in seqs:
    for r, row in enumerate(rows):
      for seg in set(row.segment.tolist()) - {0}:
        where = np.flatnonzero(row.segment == seg)
        if len(where) == len(seq) and row.tokens[where].tolist() == seq.tokens.tolist():
          alone = row_metadata(seq.kinds, np.ones(len(seq), np.int32))
          offset = where[0]
          pop = np.where(alone.pop >= len(seq), seq_len, alone.pop + offset)
          assert meta.depth[r, where].tolist() == alone.depth.tolist()
          assert meta.pop[r, where].tolist() == pop.tolist()
          assert meta.position[r, where].tolist() == list(range(len(seq)))
