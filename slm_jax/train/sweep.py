"""THE sweep over seeds / members / stages: items trained in turn, finished ones reused.

`run_sweep(items, train, record=..., marker=...)` first checks every item's folder against the
item's identity (`SweepItem.identity`, what makes it: settings, seed, data, source), by the one
identity rule (`slm_jax.identity`) or the caller's `check` — so a sweep whose third seed
folder holds another fine-tune is refused before the first seed trains, naming the differing
keys. Then, in order, an item whose finished marker exists (`finished(item)` returns its
result: by default the marker's JSON) is reused, and is reused only because its record
matched; any other item is trained (`train(item)` returns its result, or None when it stopped
unfinished, e.g. at a time limit: the sweep stops there and says so). Progress lines:
`[i/n] NAME: finished earlier (MARKER), reused` and `[i/n] NAME done: …; 12s elapsed, ETA 24s`
(the ETA counts the items trained by this call only).
"""

from __future__ import annotations

import dataclasses
import pathlib
import time
from typing import Any, Callable, Collection, Sequence

from slm_jax import identity
from slm_jax.train.loop import fmt_seconds


@dataclasses.dataclass(frozen=True)
class SweepItem:
  name: str  # shown in the progress lines: "seed 42", "member 0"
  folder: pathlib.Path  # where it trains, its record and its finished marker
  identity: dict  # what makes it (compared with the record in `folder` before any reuse)
  key: Any = None  # the caller's handle (a seed, a member index, a stage)


@dataclasses.dataclass
class SweepResult:
  results: list  # one per item up to where the sweep stopped
  complete: bool  # every item finished


def check_item(item: SweepItem, record: str, ignore: Collection[str] = ()) -> None:
  """The default check: the record `folder/record`, when there is one, must match the item's
  identity (`identity.IdentityError` naming the differing keys)."""
  identity.check_record(item.folder / record, item.identity,
                        what=f"{item.folder} holds another {item.name}", where="recorded there",
                        ignore=ignore, hint="use another output folder, or the settings it was "
                        "made with")


def run_sweep(items: Sequence[SweepItem], train: Callable[[SweepItem], Any], *, record: str,
              marker: str, check: Callable[[SweepItem], None] | None = None,
              finished: Callable[[SweepItem], Any] | None = None, ignore: Collection[str] = (),
              describe: Callable[[Any], str] = lambda result: "",
              log: Callable[[str], None] = print) -> SweepResult:
  """Trains or reuses every item in turn (see the module docstring)."""
  check = check or (lambda item: check_item(item, record, ignore))
  finished = finished or (lambda item: identity.read_record(item.folder / marker))
  for item in items:  # every item's identity before the first one trains
    check(item)
    if finished(item) is not None and not (item.folder / record).is_file():
      raise identity.IdentityError(
          f"{item.folder}: finished ({marker}) but without its record ({record}): cannot tell "
          "what made it; move it away to train it again")
  results, trained, began = [], 0, time.monotonic()
  for index, item in enumerate(items):
    head = f"[{index + 1}/{len(items)}] {item.name}"
    result = finished(item)
    if result is not None:
      log(f"{head}: finished earlier ({item.folder / marker}), reused")
      results.append(result)
      continue
    result = train(item)
    if result is None:
      log(f"{head} stopped unfinished; run again to resume the sweep there")
      return SweepResult(results, False)
    results.append(result)
    trained += 1
    elapsed = time.monotonic() - began
    text = describe(result)
    log(f"{head} done{': ' + text if text else ''}; {fmt_seconds(elapsed)} elapsed, ETA "
        f"{fmt_seconds(elapsed / trained * (len(items) - index - 1))}")
  return SweepResult(results, True)
