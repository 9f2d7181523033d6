"""Paired bootstrap between models (SPEC §9/§11, paper App. C).

B = 10,000 resamples from `numpy.random.default_rng(seed)`, seed 2027 (Tables 10–11; 2026 for
App. F), a fresh generator per task, so a task's intervals do not depend on which other tasks
ran. Each resample draws example indices with replacement, `rng.integers(0, n, size=n)`, shared
by all models; intervals are percentiles (2.5,
97.5) of the resampled statistic; the paired difference Δ = stat(a) − stat(b) gets its CI from its
own percentiles and a two-sided p = min(1, 2·min(P(Δ ≤ 0), P(Δ ≥ 0))).

Statistics:
- `mean`: scale × mean of per-example values (accuracy: 0/1 values, scale 100).
- `ppl`: exp(−Σ values / Σ denominators) (doc-PPL: per-document log p̃ and token counts).
- `group_mean`: scale × mean over groups of the group means (SG: suites); resampling is
  stratified, each group drawing its own indices (group by group, all B resamples of a group at
  once).

Vectorized: resamples are drawn in chunks of rows ([C, n] indices, the same stream as B single
draws) and every model's sums are gathers over the shared index matrix.

`rank_first`: the share of resamples in which each model has the best statistic (highest; lowest
for `ppl`), ties split evenly, so the shares sum to 1 (paper App. C: "TGTree ranks first in 52.18%
of resamples").

Macro averages (`macro_bootstrap`, paper Table 10's AVG rows) **resample tasks**: each resample
draws T task indices with replacement (shared by all models) and averages the models' per-task
scores over them, so the interval measures sensitivity to the task suite, not uncertainty within
it; paired Δ, p and rank-first shares as above.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Mapping, Sequence

import numpy as np

RESAMPLES = 10_000
SEED = 2027
STATISTICS = ("mean", "ppl", "group_mean")


def _resampled_sums(rng: np.random.Generator, columns_NK: np.ndarray, resamples: int,
                    max_cells: int = 4_000_000) -> np.ndarray:
  """[B, K] sums of each column over B resamples of its N rows (indices shared by the columns).

  Rows are drawn in chunks of [C, N] indices (C·N ≤ max_cells): the same stream as B draws of
  `rng.integers(0, N, size=N)`."""
  n = columns_NK.shape[0]
  rows = max(1, min(resamples, max_cells // max(n, 1)))
  out = np.empty((resamples, columns_NK.shape[1]))
  done = 0
  while done < resamples:
    c = min(rows, resamples - done)
    idx = rng.integers(0, n, size=(c, n))
    for k in range(columns_NK.shape[1]):
      out[done:done + c, k] = np.take(columns_NK[:, k], idx).sum(axis=1)
    done += c
  return out


def resampled_statistics(values_NM: np.ndarray, statistic: str = "mean", *,
                         denominators_NM: np.ndarray | None = None,
                         groups_N: np.ndarray | None = None, scale: float = 1.0,
                         resamples: int = RESAMPLES, seed: int = SEED) -> np.ndarray:
  """[B, M] statistic of each of M models (columns) on B shared resamples of the N examples."""
  values = np.asarray(values_NM, dtype=np.float64)
  if values.ndim != 2:
    raise ValueError(f"values must be [N, M], got shape {values.shape}")
  n = values.shape[0]
  if n == 0:
    raise ValueError("cannot bootstrap zero examples")
  rng = np.random.default_rng(seed)
  if statistic == "mean":
    return _resampled_sums(rng, values, resamples) * (scale / n)
  if statistic == "ppl":
    if denominators_NM is None:
      raise ValueError("statistic 'ppl' needs denominators (token counts)")
    den = np.broadcast_to(np.asarray(denominators_NM, dtype=np.float64), values.shape)
    both = np.concatenate([values, den], axis=1)
    sums = _resampled_sums(rng, both, resamples)
    m = values.shape[1]
    return np.exp(-sums[:, :m] / sums[:, m:])
  if statistic == "group_mean":
    if groups_N is None or len(groups_N) != n:
      raise ValueError("statistic 'group_mean' needs one group label per example")
    labels = list(dict.fromkeys(np.asarray(groups_N).tolist()))
    groups = np.asarray(groups_N)
    total = np.zeros((resamples, values.shape[1]))
    for label in labels:
      members = values[groups == label]
      total += _resampled_sums(rng, members, resamples) / len(members)
    return total * (scale / len(labels))
  raise ValueError(f"unknown statistic {statistic!r}; expected one of {', '.join(STATISTICS)}")


def point_statistic(values_NM: np.ndarray, statistic: str = "mean", *,
                    denominators_NM: np.ndarray | None = None,
                    groups_N: np.ndarray | None = None, scale: float = 1.0) -> np.ndarray:
  """[M] statistic on the original sample."""
  values = np.asarray(values_NM, dtype=np.float64)
  if statistic == "mean":
    return values.mean(axis=0) * scale
  if statistic == "ppl":
    den = np.broadcast_to(np.asarray(denominators_NM, dtype=np.float64), values.shape)
    return np.exp(-values.sum(axis=0) / den.sum(axis=0))
  if statistic == "group_mean":
    groups = np.asarray(groups_N)
    labels = list(dict.fromkeys(groups.tolist()))
    return np.mean([values[groups == g].mean(axis=0) for g in labels], axis=0) * scale
  raise ValueError(f"unknown statistic {statistic!r}; expected one of {', '.join(STATISTICS)}")


def p_value(delta_B: np.ndarray) -> float:
  """Two-sided bootstrap p = min(1, 2·min(P(Δ ≤ 0), P(Δ ≥ 0)))."""
  return float(min(1.0, 2.0 * min(np.mean(delta_B <= 0), np.mean(delta_B >= 0))))


def percentile_ci(samples_B: np.ndarray, level: float = 0.95) -> tuple[float, float]:
  tail = 100.0 * (1.0 - level) / 2.0
  lo, hi = np.percentile(samples_B, [tail, 100.0 - tail])
  return float(lo), float(hi)


def rank_first(boot_BM: np.ndarray, lower_better: bool = False) -> np.ndarray:
  """[M] share of resamples in which each model is best (ties split evenly; sums to 1)."""
  values = -np.asarray(boot_BM) if lower_better else np.asarray(boot_BM)
  best = values == values.max(axis=1, keepdims=True)
  return (best / best.sum(axis=1, keepdims=True)).mean(axis=0)


@dataclasses.dataclass
class BootstrapResult:
  statistic: str
  models: list[str]
  estimate: dict[str, float]
  ci: dict[str, tuple[float, float]]
  pairs: list[dict]  # {a, b, delta, ci, p} with delta = stat(a) - stat(b)
  resamples: int
  seed: int
  examples: int  # resampled units: examples, or tasks for a macro average
  rank_first: dict[str, float] = dataclasses.field(default_factory=dict)
  unit: str = "examples"  # what a resample draws: "examples" or "tasks"

  def to_json(self) -> dict:
    return {"statistic": self.statistic, "resamples": self.resamples, "seed": self.seed,
            "examples": self.examples, "unit": self.unit,
            "models": {m: {"estimate": self.estimate[m], "ci": list(self.ci[m]),
                           "rank_first": self.rank_first.get(m)} for m in self.models},
            "pairs": [{**p, "ci": list(p["ci"])} for p in self.pairs]}


def _result(statistic, models, point_M, boot_BM, pairs, resamples, seed, units, level,
            unit="examples") -> BootstrapResult:
  column = {m: i for i, m in enumerate(models)}
  out_pairs = []
  for a, b in (pairs if pairs is not None else itertools.combinations(models, 2)):
    delta = boot_BM[:, column[a]] - boot_BM[:, column[b]]
    out_pairs.append({"a": a, "b": b, "delta": float(point_M[column[a]] - point_M[column[b]]),
                      "ci": percentile_ci(delta, level), "p": p_value(delta)})
  first = rank_first(boot_BM, lower_better=statistic == "ppl")
  return BootstrapResult(statistic, models, {m: float(point_M[column[m]]) for m in models},
                         {m: percentile_ci(boot_BM[:, column[m]], level) for m in models},
                         out_pairs, resamples, seed, int(units),
                         {m: float(first[column[m]]) for m in models}, unit)


def paired_bootstrap(per_example: Mapping[str, np.ndarray], statistic: str = "mean", *,
                     denominators: Mapping[str, np.ndarray] | None = None,
                     groups: np.ndarray | None = None, scale: float = 1.0,
                     pairs: Sequence[tuple[str, str]] | None = None,
                     resamples: int = RESAMPLES, seed: int = SEED,
                     level: float = 0.95) -> BootstrapResult:
  """CIs of every model and paired Δ tests (default pairs: all (a, b) with a before b)."""
  models = list(per_example)
  if not models:
    raise ValueError("paired_bootstrap: no models")
  lengths = {m: len(per_example[m]) for m in models}
  if len(set(lengths.values())) != 1:
    raise ValueError(f"paired_bootstrap: models have different example counts {lengths}")
  values = np.stack([np.asarray(per_example[m], dtype=np.float64) for m in models], axis=1)
  den = None
  if denominators is not None:
    den = np.stack([np.asarray(denominators[m], dtype=np.float64) for m in models], axis=1)
  kwargs = dict(denominators_NM=den, groups_N=groups, scale=scale)
  point = point_statistic(values, statistic, **kwargs)
  boot = resampled_statistics(values, statistic, resamples=resamples, seed=seed, **kwargs)
  return _result(statistic, models, point, boot, pairs, resamples, seed, values.shape[0], level)


def macro_bootstrap(task_scores: Mapping[str, Sequence[float]], *,
                    pairs: Sequence[tuple[str, str]] | None = None, resamples: int = RESAMPLES,
                    seed: int = SEED, level: float = 0.95) -> BootstrapResult:
  """Macro average over tasks with task resampling: `task_scores[model]` = [T] per-task scores
  (the same T tasks, in the same order, for every model)."""
  models = list(task_scores)
  if not models:
    raise ValueError("macro_bootstrap: no models")
  scores_TM = np.stack([np.asarray(task_scores[m], np.float64) for m in models], axis=1)
  if scores_TM.shape[0] == 0 or not np.isfinite(scores_TM).all():
    raise ValueError(f"macro_bootstrap: needs finite scores for at least one task, got "
                     f"{scores_TM.shape[0]} tasks")
  t = scores_TM.shape[0]
  rng = np.random.default_rng(seed)
  boot = _resampled_sums(rng, scores_TM, resamples) / t
  return _result("macro_mean", models, scores_TM.mean(axis=0), boot, pairs, resamples, seed, t,
                 level, unit="tasks")
