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
- The source of an item is `UID:pair`; `heldout_pairs` gives the held-out paradigms' pairs as
  BLiMP minimal pairs (`mcqa_data.PairExample`, the `blimp_heldout` set) for the pairwise
  likelihood on held-out paradigms.
"""

from __future__ import annotations

import collections
import pathlib

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


def _read(root: str | pathlib.Path, split: str) -> tuple[pathlib.Path, list[Paradigm]]:
  from slm_jax.gtca.mcqa_data import McqaDataError, blimp_folder  # pylint: disable=import-outside-toplevel
  if split not in SPLITS:
    raise McqaDataError(f"BLiMP multiple choice has the splits {', '.join(SPLITS)}, not "
                        f"{split!r}")
  folder = blimp_folder(root)
  seen, held = paradigm_split(load_blimp(folder))
  return folder, held if split == "heldout" else seen


def load_mcqa(name: str, root: str | pathlib.Path, split: str, limit: int | None):
  """One split as `mcqa_data.GtcaSplit` of `McqaExample`s (answer 0 = A is the good one)."""
  from slm_jax.gtca.mcqa_data import GtcaSplit, McqaExample  # pylint: disable=import-outside-toplevel
  folder, paradigms = _read(root, split)
  examples = []
  for r, p, i in round_robin(paradigms, split, limit):
    paradigm = paradigms[p]
    good_first = (r + p) % 2 == 0
    options = ((paradigm.good[i], paradigm.bad[i]) if good_first
               else (paradigm.bad[i], paradigm.good[i]))
    examples.append(McqaExample(QUESTION, options, 0 if good_first else 1,
                                f"{paradigm.uid}:{i}", paradigm.field))
  counts = collections.Counter(rows=len(examples), examples=len(examples), unlabeled=0,
                               paradigms=len(paradigms),
                               good_first=sum(x.answer == 0 for x in examples))
  return GtcaSplit(name, split, sorted(folder.glob("*.jsonl")), examples, counts)


def heldout_pairs(name: str, root: str | pathlib.Path, limit: int | None):
  """The held-out paradigms' first `limit` pairs each (file order) as a BLiMP `GtcaSplit` of
  `PairExample`s (`real_sets.blimp_metrics` scores them)."""
  from slm_jax.gtca.mcqa_data import GtcaSplit, PairExample  # pylint: disable=import-outside-toplevel
  folder, held = _read(root, "heldout")
  kept = [Paradigm(p.uid, p.field, p.term, p.good[:limit], p.bad[:limit]) for p in held]
  examples = [PairExample(good, bad, k, f"{p.uid}:{i}") for k, p in enumerate(kept)
              for i, (good, bad) in enumerate(zip(p.good, p.bad))]
  counts = collections.Counter(rows=len(examples), examples=len(examples), unlabeled=0,
                               pairs=len(examples), paradigms=len(kept))
  return GtcaSplit(name, "all", sorted(folder.glob("*.jsonl")), examples, counts, kept)
