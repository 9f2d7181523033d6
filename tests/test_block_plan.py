"""The block planner against the dense reference mask (the oracle only), on random trees and GUM.

Every tile the plan calls empty must be all-False in `structure.dense_mask`, every full tile
all-True; the visit lists must list exactly the non-empty tiles. On realistic lin2 rows the plan
must also find (nearly) all truly empty tiles, and STACK attention must leave more of them empty
than causal.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from slm_jax.kernels.block_plan import (EMPTY, FULL, pad_metadata, padded_length, plan_blocks,
                                       skip_fraction)
from slm_jax.data.packing import pack_documents
from slm_jax.linearize import linearize
from slm_jax.structure import Attention, dense_mask, parse_attention, row_metadata
from slm_jax.trees import Tree
from tests.shared_data import require_shared

ALL_CODES = np.asarray([int(a) for a in Attention], np.int32)  # one head per code
ATTENTIONS = ("causal", "tg", "tg_nomask", "tg_nomask_aug", "mix(tg_nomask,tg)", "mix(causal,tg)")
LABELS = ("S", "NP", "VP", "PP", "SBAR")


def random_tree(rng: np.random.Generator, depth: int = 0) -> Tree:
  """A random normalized tree (nested same-label constituents included)."""
  children = []
  for _ in range(int(rng.integers(1, 4))):
    if depth < 5 and rng.random() < 0.45:
      children.append(random_tree(rng, depth + 1))
    else:
      children.append(f"w{int(rng.integers(0, 50))}")
  return Tree(LABELS[int(rng.integers(0, len(LABELS)))], tuple(children))


def random_documents(rng: np.random.Generator, count: int, max_sentences: int = 4):
  return [[random_tree(rng) for _ in range(int(rng.integers(1, max_sentences + 1)))]
          for _ in range(count)]


def packed_rows(documents, length: int, scheme: str = "lin2", rows: int | None = None):
  """kinds, segment [N, length] of documents packed sentence-wise (padding at row ends)."""
  sequences = [linearize(d, scheme) for d in documents]
  packed, _ = pack_documents(sequences, length, "<pad>")
  packed = packed[:rows] if rows else packed
  return (np.stack([r.kinds for r in packed]).astype(np.int32),
          np.stack([r.segment for r in packed]).astype(np.int32))


def random_rows(seed: int, length: int, rows: int, scheme: str = "lin2"):
  """Rows of several random documents each (sentence-packed, padding at row ends)."""
  rng = np.random.default_rng(seed)
  kinds, segment = packed_rows(random_documents(rng, 12 * rows), length, scheme, rows)
  return row_metadata(kinds, segment)


@functools.lru_cache(maxsize=1)
def _gum_documents(folder: str):
  from slm_jax import ptb  # pylint: disable=g-import-not-at-top
  return [trees for _, trees in ptb.read_folder(folder, report=ptb.ReadReport())]


def gum_rows(length: int, rows: int | None = None, scheme: str = "lin2"):
  """The first `rows` packed rows of GUM (skips when ../shared/data/gum is absent)."""
  documents = _gum_documents(str(require_shared("gum") / "const"))
  if rows:  # a few documents fill a few rows (GUM documents are long)
    documents = documents[:max(4, rows * length // 1000)]
  return row_metadata(*packed_rows(documents, length, scheme, rows))


def tile_truth(meta, codes_H, block_q: int, block_k: int):
  """(any, all) of the dense mask per head and tile: bool [B, H, Q, K] each (test oracle)."""
  masks = [dense_mask(meta, parse_attention(Attention(int(c)).name.lower()))[:, 0]
           for c in codes_H]
  dense = np.stack(masks, axis=1)  # [B, H, T, T]
  B, H, T, _ = dense.shape
  tiles = dense.reshape(B, H, T // block_q, block_q, T // block_k, block_k)
  return tiles.any(axis=(3, 5)), tiles.all(axis=(3, 5))


def check_plan(plan, meta, codes_H, block_q, block_k) -> tuple[float, float]:
  """Asserts the plan is conservative and its lists consistent.

  Returns the (plan empty, truly empty) tile fractions.
  """
  kind = np.asarray(plan.kind_BHIJ)
  anyt, allt = tile_truth(meta, codes_H, block_q, block_k)
  assert kind.dtype == np.int8 and kind.shape == anyt.shape
  assert not (anyt & (kind == EMPTY)).any(), "a tile called empty has an attending pair"
  assert not (~allt & (kind == FULL)).any(), "a tile called full has a masked pair"
  visit = kind != EMPTY
  for count, blocks, visit_ in ((plan.count_BHI, plan.kblocks_BHIJ, visit),
                                (plan.qcount_BHJ, plan.qblocks_BHJI, np.swapaxes(visit, -1, -2))):
    count, blocks = np.asarray(count), np.asarray(blocks)
    np.testing.assert_array_equal(count, visit_.sum(-1))
    assert count.min() >= 1  # the diagonal tile is never empty
    M = blocks.shape[-1]
    expect = np.argsort(~visit_, axis=-1, kind="stable")  # non-empty first, in order
    last = np.take_along_axis(expect, count[..., None] - 1, axis=-1)
    expect = np.where(np.arange(M) < count[..., None], expect, last)
    np.testing.assert_array_equal(blocks, expect)
  return float((kind == EMPTY).mean()), float((~anyt).mean())


@pytest.mark.parametrize("block_q,block_k", [(16, 16), (32, 16), (16, 64), (64, 32)])
def test_random_rows_every_code(block_q, block_k):
  meta = random_rows(seed=block_q * 100 + block_k, length=256, rows=4)
  plan = plan_blocks(meta, ALL_CODES, block_q, block_k, xp=np)
  found, true = check_plan(plan, meta, ALL_CODES, block_q, block_k)
  assert found >= 0.95 * true, (found, true)


@pytest.mark.parametrize("scheme", ["lin1", "lin3", "lin1_noont"])
def test_other_schemes_stay_conservative(scheme):
  meta = random_rows(seed=7, length=128, rows=3, scheme=scheme)
  check_plan(plan_blocks(meta, ALL_CODES, 16, 32, xp=np), meta, ALL_CODES, 16, 32)


def test_jit_device_plan_equals_numpy():
  meta = random_rows(seed=3, length=128, rows=2)
  codes = parse_attention("mix(tg_nomask,tg)").head_codes(4)
  host = plan_blocks(meta, codes, 16, 32, xp=np)
  device = jax.jit(lambda m: plan_blocks(m, codes, 16, 32))(jax.tree.map(jnp.asarray, meta))
  for a, b in zip(host, device):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("name", ATTENTIONS)
def test_heads_share_their_groups_plan(name):
  spec = parse_attention(name)
  codes = spec.head_codes(4)
  meta = random_rows(seed=11, length=128, rows=2)
  plan = plan_blocks(meta, codes, 32, 32, xp=np)
  check_plan(plan, meta, codes, 32, 32)
  single = {int(c): plan_blocks(meta, [c], 32, 32, xp=np) for c in set(codes.tolist())}
  for h, c in enumerate(codes.tolist()):
    np.testing.assert_array_equal(plan.kind_BHIJ[:, h], single[c].kind_BHIJ[:, 0])


def test_padding_and_all_padding_blocks():
  meta = random_rows(seed=5, length=100, rows=2)
  length = padded_length(100, 16, 32)
  assert length == 128
  padded = pad_metadata(meta, length, xp=np)
  plan = plan_blocks(padded, ALL_CODES, 16, 32, xp=np)
  check_plan(plan, padded, ALL_CODES, 16, 32)
  kind = np.asarray(plan.kind_BHIJ)
  assert (kind[:, :, -1, :-1] == EMPTY).all()  # the all-padding last query block: diagonal only
  with pytest.raises(ValueError, match="multiple"):
    plan_blocks(meta, ALL_CODES, 16, 32, xp=np)


def test_gum_lin2_rows_stack_skips_more():
  meta = gum_rows(512, rows=12)
  plan = plan_blocks(meta, ALL_CODES, 32, 32, xp=np)
  found, true = check_plan(plan, meta, ALL_CODES, 32, 32)
  assert found >= 0.95 * true, (found, true)
  empty = (np.asarray(plan.kind_BHIJ) == EMPTY).mean(axis=(0, 2, 3))  # per code
  print("GUM lin2 T=512 32x32 empty fraction per code:",
        dict(zip([a.name for a in Attention], np.round(empty, 3))))
  assert empty[Attention.TG] > empty[Attention.CAUSAL] + 0.02
  fractions = skip_fraction(plan)
  assert abs(sum(fractions.values()) - 1) < 1e-9
