"""The Triton kernels' visit lists (`slm_jax.kernels.triton_plan`): full tiles first, then
partial ones, each in increasing order; counts of both; numpy and jax.numpy agree."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from slm_jax.kernels.block_plan import EMPTY as E, FULL as F, PARTIAL as P
from slm_jax.kernels.triton_plan import visit_lists

KINDS = np.array([[[[P, E, E, E],
                    [F, P, E, E],
                    [F, E, P, E],
                    [P, F, F, P]]]], np.int8)  # [B=1, H=1, I=4, J=4]


def test_full_tiles_come_first_and_are_counted():
  lists = visit_lists(KINDS, xp=np)
  assert lists.count_BHI.tolist() == [[[1, 2, 2, 4]]]
  assert lists.full_BHI.tolist() == [[[0, 1, 1, 2]]]
  kblocks = lists.kblocks_BHIJ[0, 0]
  assert [kblocks[i, :n].tolist() for i, n in enumerate(lists.count_BHI[0, 0])] == [
      [0], [0, 1], [0, 2], [1, 2, 0, 3]]


def test_the_transposed_lists_serve_the_key_blocks():
  lists = visit_lists(KINDS, xp=np)
  assert lists.qcount_BHJ.tolist() == [[[4, 2, 2, 1]]]
  assert lists.qfull_BHJ.tolist() == [[[2, 1, 1, 0]]]
  qblocks = lists.qblocks_BHJI[0, 0]
  assert [qblocks[j, :n].tolist() for j, n in enumerate(lists.qcount_BHJ[0, 0])] == [
      [1, 2, 0, 3], [3, 1], [3, 2], [3]]


def test_numpy_and_jax_agree_and_give_int32():
  rng = np.random.default_rng(0)
  kinds = rng.integers(0, 3, size=(2, 3, 5, 7)).astype(np.int8)
  for a, b in zip(visit_lists(kinds, xp=np), visit_lists(jnp.asarray(kinds))):
    assert b.dtype == jnp.int32
    np.testing.assert_array_equal(a, np.asarray(b))
