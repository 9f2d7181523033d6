"""Synthetic packed lin2 rows (`slm_jax.kernels.synthetic_rows`), the autotuner's timing inputs:
well-formed lin2 (every ONT closed by CNT1, CNT2), documents in segments, padding only at row
ends, deterministic, and near real rows in how many tiles the block plan skips."""

from __future__ import annotations

import numpy as np

from slm_jax.kernels.block_plan import plan_blocks, skip_fraction
from slm_jax.kernels.synthetic_rows import lin2_metadata, lin2_rows
from slm_jax.kinds import Kind
from slm_jax.structure import parse_attention


def test_rows_are_well_formed_lin2_documents():
  kinds, segment = lin2_rows(4, 512, seed=1)
  assert kinds.shape == segment.shape == (4, 512)
  for row_kinds, row_segment in zip(kinds, segment):
    real = row_segment != 0
    first_pad = np.argmin(real) if not real.all() else len(real)
    assert not real[first_pad:].any()  # padding only at the end
    assert (row_kinds[~real] == Kind.PAD).all() and (row_kinds[real] != Kind.PAD).all()
    assert (np.diff(row_segment[real]) >= 0).all()  # documents in order, contiguous
    depth = np.cumsum((row_kinds == Kind.ONT).astype(int) - (row_kinds == Kind.CNT1))
    assert depth.min() == 0 and depth[-1] == 0  # every sentence closes within its row
    assert ((row_kinds == Kind.CNT1) == np.roll(row_kinds == Kind.CNT2, -1)).all()
  assert (kinds == Kind.BOS).any() and (kinds == Kind.EOS).any()


def test_rows_are_deterministic_and_seeded():
  a, b, c = lin2_rows(2, 256, 0), lin2_rows(2, 256, 0), lin2_rows(2, 256, 1)
  assert all(np.array_equal(x, y) for x, y in zip(a, b))
  assert not np.array_equal(a[0], c[0])


def test_tile_skipping_is_like_real_rows():
  """docs/DEVICE_H200.md, GUM lin2 at T 2048, 64×64 tiles: causal 56% empty, tg 68%."""
  meta = lin2_metadata(4, 2048)
  empty = {name: skip_fraction(plan_blocks(meta, parse_attention(name).head_codes(1), 64, 64,
                                           xp=np))["empty"] for name in ("causal", "tg")}
  assert 0.45 < empty["causal"] < 0.75 and empty["causal"] < empty["tg"] < 0.85
