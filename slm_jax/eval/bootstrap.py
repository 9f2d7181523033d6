"""Paired bootstrap between models (SPEC §9/§11, paper App. C).

B = 10,000 resamples from `numpy.random.default_rng(2027)` (a fresh generator per task, so a
task's intervals do not depend on which other tasks ran). Each resample draws example indices with
replacement, `rng.integers(0, n, size=n)`, shared by all models; intervals are percentiles (2.5,
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


@dataclasses.dataclass
class BootstrapResult:
  statistic: str
  models: list[str]
  estimate: dict[str, float]
  ci: dict[str, tuple[float, float]]
  pairs: list[dict]  # {a, b, delta, ci, p} with delta = stat(a) - stat(b)
  resamples: int
  seed: int
  examples: int

  def to_json(self) -> dict:
    return {"statistic": self.statistic, "resamples": self.resamples, "seed": self.seed,
            "examples": self.examples,
            "models": {m: {"estimate": self.estimate[m], "ci": list(self.ci[m])}
                       for m in self.models},
            "pairs": [{**p, "ci": list(p["ci"])} for p in self.pairs]}


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
  column = {m: i for i, m in enumerate(models)}
  out_pairs = []
  for a, b in (pairs if pairs is not None else itertools.combinations(models, 2)):
    delta = boot[:, column[a]] - boot[:, column[b]]
    out_pairs.append({"a": a, "b": b, "delta": float(point[column[a]] - point[column[b]]),
                      "ci": percentile_ci(delta, level), "p": p_value(delta)})
  return BootstrapResult(statistic, models, {m: float(point[column[m]]) for m in models},
                         {m: percentile_ci(boot[:, column[m]], level) for m in models},
                         out_pairs, resamples, seed, int(values.shape[0]))
