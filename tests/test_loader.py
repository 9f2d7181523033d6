"""In-memory loader: batches carry consistent metadata; the iterator state resumes exactly."""

from __future__ import annotations

import numpy as np

from slm_jax.configurations import CONFIGURATIONS
from slm_jax.corpus.treebank import generate_documents
from slm_jax.data.loader import Batch, BatchIterator, PackedDataset
from slm_jax.structure import row_metadata
from slm_jax.tokenizer import make_tokenizer


def _dataset(name="tg", seq_len=128):
  docs = generate_documents(30, seed=1)
  tokenizer = make_tokenizer("word", words=[w for d in docs for t in d for w in t.leaves()])
  return PackedDataset(docs, tokenizer, CONFIGURATIONS[name], seq_len=seq_len)


def test_batches_and_accounting():
  data = _dataset()
  assert data.stats.tokens_packed + data.stats.tokens_dropped == data.stats.tokens
  batch = next(iter(BatchIterator(data, batch_size=4, seed=0)))
  assert batch.tokens.shape == (4, 128) and batch.targets.dtype == bool
  meta = row_metadata(batch.meta.kind, batch.meta.segment)
  assert np.array_equal(meta.pop, batch.meta.pop)
  assert not batch.targets[batch.meta.kind == 7].any()  # CNT2 is not a target under tg


def test_iterator_state_resumes_the_same_stream():
  data = _dataset("tree")
  a = BatchIterator(data, batch_size=3, seed=5)
  stream = [next(a).tokens for _ in range(12)]
  b = BatchIterator(data, batch_size=3, seed=5)
  for _ in range(7):
    next(b)
  state = b.state()
  c = BatchIterator(data, batch_size=3, seed=5)
  c.restore(state)
  assert all(np.array_equal(next(c).tokens, want) for want in stream[7:])


def test_pad_rows_appends_target_free_padding_rows():
  data = _dataset()
  batch = data.batch(np.arange(3))
  padded = batch.pad_rows(4)
  assert padded.tokens.shape == (4, 128) and batch.pad_rows(3) is batch
  flat = lambda b: [b.tokens, *b.meta, b.targets]
  for got, value in zip(flat(padded), flat(batch)):
    np.testing.assert_array_equal(got[:3], value)
  assert not padded.targets[3].any() and not padded.meta.segment[3].any()
  rebuilt = Batch.from_rows(padded.tokens, padded.meta.kind, padded.meta.segment,
                            data.configuration)
  for got, value in zip(flat(padded), flat(rebuilt)):  # padding metadata = the shared rule's
    np.testing.assert_array_equal(got, value)
