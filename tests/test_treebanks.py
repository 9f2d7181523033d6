"""Every tree of the shared PTB sample and GUM: masks, metadata and targets equal the oracle.

Needs ../shared/data (skipped with the reason when absent). Each tree is its own document
(`<s> tree </s>`) for the T×T mask comparison under every attention type; whole GUM documents are
compared on metadata (O(T) oracle) and packed into rows.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from slm_jax import ptb
from slm_jax.configurations import CONFIGURATIONS
from slm_jax.data.packing import pack_documents, stack_rows
from slm_jax.kinds import Kind
from slm_jax.linearize import base_sequence, derive, linearize
from slm_jax.structure import dense_mask, parse_attention, row_metadata, target_mask
from tests import oracle
from tests.shared_data import require_shared

ATTENTIONS = ("causal", "tg", "tg_nomask", "tg_nomask_aug")


@functools.lru_cache(maxsize=None)
def _documents(name: str):
  folder = require_shared(name)
  pattern = ("*.mrg",) if name == "ptb_sample" else ("*.ptb",)
  return tuple(tuple(trees) for _, trees in ptb.read_folder(folder, pattern))


def _oracle_row_masks(kinds: np.ndarray) -> dict[str, np.ndarray]:
  """Oracle masks of one segment for the four single attention types, as dense arrays."""
  out = {}
  kinds_list = kinds.tolist()
  for attention in ATTENTIONS:
    attends = oracle.stack_walk_attends(kinds_list, attention)
    mask = np.zeros((len(kinds), len(kinds)), bool)
    rows = np.repeat(np.arange(len(kinds)), [len(a) for a in attends])
    mask[rows, np.concatenate(attends).astype(int)] = True
    out[attention] = mask
  return out


@pytest.mark.parametrize("name", ["ptb_sample", pytest.param("gum", marks=pytest.mark.slow)])  # gum: 14,597 trees
def test_every_tree_masks_equal_the_stack_walk(name):
  documents = _documents(name)
  trees = [tree for document in documents for tree in document]
  assert len(trees) == {"ptb_sample": 3914, "gum": 14597}[name]
  mixes = {m: parse_attention(m) for m in ("mix(tg_nomask,tg)", "mix(causal,tg)")}
  for tree in trees:
    sequence = linearize(tree, "lin2")
    meta = row_metadata(sequence.kinds, np.ones(len(sequence), np.int32))
    want = _oracle_row_masks(sequence.kinds)
    for attention in ATTENTIONS:
      got = dense_mask(meta, parse_attention(attention))[0]
      assert np.array_equal(got, want[attention]), (attention, str(tree))
    for spec in mixes.values():
      got = dense_mask(meta, spec)
      for group, code in enumerate(spec.groups):
        assert np.array_equal(got[group], want[code.name.lower()]), (spec.name, str(tree))


@pytest.mark.parametrize("name", ["ptb_sample", pytest.param("gum", marks=pytest.mark.slow)])  # gum: 14,597 trees
def test_every_document_metadata_and_targets_equal_the_oracle(name):
  for document in _documents(name):
    base = base_sequence(document)
    for scheme in ("lin1", "lin2", "lin3", "lin1_noont", "lin1_merge", "pause1"):
      sequence = derive(base, scheme)
      symbols, kinds = oracle.loop_linearize(document, scheme)
      assert sequence.symbols() == symbols
      meta = row_metadata(sequence.kinds, np.ones(len(sequence), np.int32))
      depth, pop = oracle.stack_walk_metadata(kinds)
      assert meta.depth.tolist() == depth and meta.pop.tolist() == pop, scheme
    config = CONFIGURATIONS["tgnomask_mix_tg"]
    sequence = derive(base, "lin2")
    got = target_mask(sequence.kinds, np.ones(len(sequence), np.int32), "lin2", config.attention)
    assert got.tolist() == oracle.loop_targets(sequence.kinds.tolist(), "tgnomask_mix_tg", "lin2")


def test_gum_packed_rows_keep_per_document_metadata():
  documents = _documents("gum")[:40]
  sequences = [linearize(d, "lin2") for d in documents]
  rows, stats = pack_documents(sequences, seq_len=1024, pad_token="<pad>")
  assert stats.tokens_packed + stats.tokens_dropped == stats.tokens
  batch = stack_rows(rows)
  meta = row_metadata(batch.kinds, batch.segment)
  for r, row in enumerate(rows):
    for segment in sorted(set(row.segment.tolist()) - {0}):
      where = np.flatnonzero(row.segment == segment)
      kinds = row.kinds[where].tolist()
      depth, pop = oracle.stack_walk_metadata(kinds)
      # a piece ends at a sentence end (a CNT2): its pop stays own index + 1, inside the row
      pop = [p + where[0] if p < len(kinds) or k == Kind.CNT2 else 1024
             for p, k in zip(pop, kinds)]
      assert meta.depth[r, where].tolist() == depth
      assert meta.pop[r, where].tolist() == pop
