"""BLiMP as GTCA's syntax-sensitive multiple-choice task (issue #34 item 4), built offline from
BLiMP's release layout (`data/<UID>.jsonl`, read by `slm_jax.eval.blimp.load_blimp`).

Each question is one minimal pair: "Which sentence is grammatical?" with options A and B, the
good and the bad sentence in a balanced order.

- **Paradigm split** (fixed, from the sorted UIDs alone): the paradigm at 0-based position k in
  UID order is **held out** iff `k % HELD_OUT_EVERY == HELD_OUT_EVERY - 1` (every 4th: of BLiMP's
  67, the 16 at k = 3, 7, …, 63; the other 51 are **seen**). `paradigm_split` gives both lists.
- **Pair split** within a seen paradigm: pair i (0-based in file order) is a **test** pair iff
  `i % TEST_EVERY == TEST_EVERY - 1` (i = 4, 9, …: 200 of 1,000), else a **train** pair.
- **Splits** (`SPLITS`): `train` = the train pairs of the seen paradigms (GTCA's dev is the
  first `dev_items` of them, never trained on: `real_sets.load_real`), `test` = the test pairs
  of the seen paradigms (held-out pairs, same paradigms), `heldout` = every pair of the
  held-out paradigms (held-out paradigms). Items are ordered round by round (round r takes
  each paradigm's r-th eligible pair, paradigms in UID order), so any prefix (`limit`)
  covers the paradigms evenly.
- **Option order**: the item of round r and paradigm position p (within the split's
  paradigms) has the good sentence as A iff `(r + p) % 2 == 0` — half the items of every
  complete round and of every paradigm over two rounds; deterministic, no generator.
- The source of an item is `UID:pair`, its group the paradigm's field. `mcqa_data` turns the
  items into `McqaExample`s (sets `blimp_mcqa`, `blimp_mcqa_heldout`) and the held-out
  paradigms' first pairs (`first_pairs`) into BLiMP minimal pairs (`blimp_heldout`) for the
  pairwise likelihood on held-out paradigms.
"""

from __future__ import annotations

import pathlib

from slm_jax.data.rows import RowDataError
from slm_jax.eval.blimp import Paradigm, load_blimp

QUESTION = "Which sentence is grammatical?"
HELD_OUT_EVERY = 4
TEST_EVERY = 5
SPLITS = ("train", "test", "heldout")


def paradigm_split(paradigms: list[Paradigm]) -> tuple[list[Paradigm], list[Paradigm]]:
  """(seen, held out) of paradigms sorted by UID (module docstring)."""
  ordered = sorted(paradigms, key=lambda p: p.uid)
  held = [p for k, p in enumerate(ordered) if k % HELD_OUT_EVERY == HELD_OUT_EVERY - 1]
  seen = [p for k, p in enumerate(ordered) if k % HELD_OUT_EVERY != HELD_OUT_EVERY - 1]
  return seen, held


def _eligible(split: str, n_pairs: int) -> list[int]:
  if split == "heldout":
    return list(range(n_pairs))
  is_test = split == "test"
  return [i for i in range(n_pairs) if (i % TEST_EVERY == TEST_EVERY - 1) == is_test]


def round_robin(paradigms: list[Paradigm], split: str, limit: int | None
                ) -> list[tuple[int, int, int]]:
  """(round, paradigm position, pair index) of the split's items in order, the first `limit`."""
  pairs = [_eligible(split, len(p)) for p in paradigms]
  out = []
  for r in range(max(map(len, pairs), default=0)):
    for p, eligible in enumerate(pairs):
      if r < len(eligible):
        out.append((r, p, eligible[r]))
        if limit is not None and len(out) >= limit:
          return out
  return out


def read_paradigms(folder: pathlib.Path, split: str) -> list[Paradigm]:
  """The paradigms of one split (`SPLITS`) of the BLiMP files in `folder`, every pair."""
  if split not in SPLITS:
    raise RowDataError(f"BLiMP multiple choice has the splits {', '.join(SPLITS)}, not "
                       f"{split!r}")
  seen, held = paradigm_split(load_blimp(folder))
  return held if split == "heldout" else seen


def mcqa_items(paradigms: list[Paradigm], split: str, limit: int | None
               ) -> list[tuple[str, tuple[str, str], int, str, str]]:
  """(question, options, answer, source `UID:pair`, group = the paradigm's field) of the
  split's first `limit` items; answer 0 (A) is the good sentence in half of them."""
  out = []
  for r, p, i in round_robin(paradigms, split, limit):
    paradigm = paradigms[p]
    good_first = (r + p) % 2 == 0
    options = ((paradigm.good[i], paradigm.bad[i]) if good_first
               else (paradigm.bad[i], paradigm.good[i]))
    out.append((QUESTION, options, 0 if good_first else 1, f"{paradigm.uid}:{i}",
                paradigm.field))
  return out


def first_pairs(paradigms: list[Paradigm], limit: int | None) -> list[Paradigm]:
  """Each paradigm cut to its first `limit` pairs (file order)."""
  return [Paradigm(p.uid, p.field, p.term, p.good[:limit], p.bad[:limit]) for p in paradigms]
