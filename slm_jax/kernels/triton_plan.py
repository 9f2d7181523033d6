"""Visit lists of the Triton attention kernels, from a block plan's tile kinds.

For each (row, head, query block): how many key blocks to visit (`count`, the non-empty tiles),
how many of them are full (`full`: every pair attends, so the kernel skips the mask and the
metadata loads), and their indices, full tiles first then partial ones, each group in increasing
order; the same transposed (per key block, its query blocks) for the dk/dv kernel. Entries past
`count` are the empty blocks' indices and are never read. Works with numpy and jax.numpy.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax.numpy as jnp

from slm_jax.kernels.block_plan import EMPTY, FULL, PARTIAL


class VisitLists(NamedTuple):
  """int32 lists of a plan [B, H, I query blocks, J key blocks] (I, J: block counts)."""

  count_BHI: Any
  full_BHI: Any
  kblocks_BHIJ: Any
  qcount_BHJ: Any
  qfull_BHJ: Any
  qblocks_BHJI: Any


def _lists(kind_NM, xp):
  """(count, full, order) along the last axis of tile kinds: full, then partial, then empty."""
  M = kind_NM.shape[-1]
  column = xp.arange(M, dtype=xp.int32)
  rank = xp.where(kind_NM == FULL, column,
                  xp.where(kind_NM == PARTIAL, M + column, 2 * M + column))
  order = xp.argsort(rank, axis=-1).astype(xp.int32)
  count = xp.sum(kind_NM != EMPTY, axis=-1, dtype=xp.int32)
  full = xp.sum(kind_NM == FULL, axis=-1, dtype=xp.int32)
  return count, full, order


def visit_lists(kind_BHIJ, xp=jnp) -> VisitLists:
  """The kernels' visit lists of tile kinds `kind_BHIJ` (EMPTY / PARTIAL / FULL)."""
  kind = xp.asarray(kind_BHIJ)
  return VisitLists(*_lists(kind, xp), *_lists(xp.swapaxes(kind, -1, -2), xp))
