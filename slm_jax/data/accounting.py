"""What went in, what came out, and what was dropped and why, for every data stage.

Each stage (`parse`, `prepare`, `pipeline`) keeps one `StageCounts`: documents, sentences and tokens
in and out, and every dropped item by unit and reason (e.g. sentences "malformed tree (unbalanced
brackets)", sentences "longer than a row", documents "empty document"). The invariant
`in == out + dropped` holds per unit (documents, sentences) for every stage, so nothing disappears
silently; tests assert it. Counts are plain ints, so they travel as JSON in manifests and in
checkpointed iterator states, and `merge` adds counts from shards, hosts and workers.

Token units differ by stage: parse counts words, prepare counts lin1 base symbols (words,
brackets, BOS/EOS), the pipeline counts ids of the run's configuration.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Iterable

from slm_jax.data.packing import PackStats
from slm_jax.ptb import ReadReport

UNITS = ("documents", "sentences", "tokens")


@dataclasses.dataclass
class StageCounts:
  """Counts of one stage; `dropped[unit][reason]`: how many of `unit` were dropped for `reason`."""

  documents_in: int = 0
  documents_out: int = 0
  sentences_in: int = 0
  sentences_out: int = 0
  tokens_in: int = 0
  tokens_out: int = 0
  dropped: dict[str, collections.Counter] = dataclasses.field(
      default_factory=lambda: {unit: collections.Counter() for unit in UNITS})
  # Stage-specific facts that are not drops (rows, padding, documents split, cache hits …).
  notes: collections.Counter = dataclasses.field(default_factory=collections.Counter)

  def drop(self, unit: str, reason: str, count: int = 1) -> None:
    if unit not in self.dropped:
      raise ValueError(f"unknown unit {unit!r}; expected one of {UNITS}")
    if count:
      self.dropped[unit][reason] += count

  def dropped_total(self, unit: str) -> int:
    return sum(self.dropped[unit].values())

  def balanced(self) -> bool:
    """`in == out + dropped` for documents and sentences."""
    return (self.documents_in == self.documents_out + self.dropped_total("documents")
            and self.sentences_in == self.sentences_out + self.dropped_total("sentences"))

  def merge(self, other: StageCounts) -> StageCounts:
    for name in ("documents_in", "documents_out", "sentences_in", "sentences_out", "tokens_in",
                 "tokens_out"):
      setattr(self, name, getattr(self, name) + getattr(other, name))
    for unit in UNITS:
      self.dropped[unit].update(other.dropped[unit])
    self.notes.update(other.notes)
    return self

  def add_read_report(self, report: ReadReport) -> None:
    """The sentences of a PTB read: trees kept, malformed trees dropped by reason, trees left
    empty by normalization dropped. Documents (files, records) are the caller's to count."""
    self.sentences_in += report.trees_read + report.trees_skipped + report.empty_after_normalization
    self.sentences_out += report.trees_read
    for reason, count in report.skipped_by_reason.items():
      if reason != "invalid utf-8":  # a whole file, not a tree: the caller drops the document
        self.drop("sentences", f"malformed tree ({reason})", count)
    self.drop("sentences", "empty after normalization", report.empty_after_normalization)
    if report.unknown_labels:
      self.notes["unknown labels mapped to X"] += sum(report.unknown_labels.values())

  def add_pack_stats(self, stats: PackStats) -> None:
    """A packer's accounting: sentences longer than a row are dropped (with their tokens)."""
    self.sentences_in += stats.sentences
    self.sentences_out += stats.sentences - stats.sentences_too_long
    self.tokens_in += stats.tokens
    self.tokens_out += stats.tokens_packed
    self.drop("sentences", "longer than a row", stats.sentences_too_long)
    self.drop("tokens", "sentence longer than a row", stats.tokens_dropped)
    self.notes["rows"] += stats.rows
    self.notes["padding tokens"] += stats.padding
    self.notes["documents split across rows"] += stats.documents_split

  def to_json(self) -> dict[str, Any]:
    out = {name: getattr(self, name) for name in ("documents_in", "documents_out", "sentences_in",
                                                  "sentences_out", "tokens_in", "tokens_out")}
    out["dropped"] = {unit: dict(sorted(self.dropped[unit].items())) for unit in UNITS}
    out["notes"] = dict(sorted(self.notes.items()))
    return out

  @classmethod
  def from_json(cls, data: dict[str, Any]) -> StageCounts:
    counts = cls(**{k: int(v) for k, v in data.items() if k not in ("dropped", "notes")})
    for unit, reasons in data.get("dropped", {}).items():
      counts.dropped.setdefault(unit, collections.Counter()).update(
          {k: int(v) for k, v in reasons.items()})
    counts.notes.update({k: int(v) for k, v in data.get("notes", {}).items()})
    return counts

  def summary(self, stage: str = "") -> str:
    head = f"{stage}: " if stage else ""
    lines = [f"{head}{self.documents_in:,} documents → {self.documents_out:,}; "
             f"{self.sentences_in:,} sentences → {self.sentences_out:,}; "
             f"{self.tokens_in:,} tokens → {self.tokens_out:,}"]
    for unit in UNITS:
      if self.dropped[unit]:
        reasons = ", ".join(f"{reason} ×{count:,}" for reason, count
                            in self.dropped[unit].most_common())
        lines.append(f"  dropped {unit}: {reasons}")
    if self.notes:
      lines.append("  " + ", ".join(f"{k} {v:,}" for k, v in sorted(self.notes.items())))
    return "\n".join(lines)


@dataclasses.dataclass
class Accounting:
  """StageCounts per stage name, merged across shards, hosts and workers."""

  stages: dict[str, StageCounts] = dataclasses.field(default_factory=dict)

  def stage(self, name: str) -> StageCounts:
    return self.stages.setdefault(name, StageCounts())

  def merge(self, other: Accounting) -> Accounting:
    for name, counts in other.stages.items():
      self.stage(name).merge(counts)
    return self

  def to_json(self) -> dict[str, Any]:
    return {name: counts.to_json() for name, counts in self.stages.items()}

  @classmethod
  def from_json(cls, data: dict[str, Any]) -> Accounting:
    return cls({name: StageCounts.from_json(counts) for name, counts in data.items()})

  def summary(self) -> str:
    return "\n".join(counts.summary(name) for name, counts in self.stages.items())


def merged(accountings: Iterable[Accounting]) -> Accounting:
  total = Accounting()
  for accounting in accountings:
    total.merge(accounting)
  return total
