"""Markdown tables: the one writer of every table slm_jax prints (reports, benchmarks, evalb).

Cells:
- `number(value, digits, signed=False)`: fixed-point text (`+` sign when `signed`); a missing
  value (None, NaN) is `DASH` ("–") — in every table, never "nan" or "None".
- `mean_sd(values)` → `MeanSD(mean, sd, n)` of the finite values: sample SD (ddof = 1), `sd` None
  for a single value (no SD exists), the whole result None when no value is finite;
  `mean_sd_text(stats, digits)`: `83.12 ± 0.41`, one value `83.12 (n=1)`, none `–`. The n = 1
  form is the same in every table: the cell says why it has no SD.
- `interval(value, ci, digits, signed=False)`: `x [lo, hi]`; `p_text(p)`: `p=.042`, `p<.001`.
- `best_rows(values, lower_better, digits)`: the rows holding the best value at the shown
  precision (all of them on a tie); none when fewer than two values are known or all of them
  tie; `bold(cells, rows)` wraps those cells in `**`.

Tables:
- `header(columns, right_align=False)` (the two header lines; `right_align`: every column after
  the first right-aligned, `---:`) and `row(cells)` (one line) for a table printed row by row;
  `markdown(columns, rows, right_align=False)` the whole table as one string. Cells are strings
  as given, numbers `str()`, missing values `DASH`.
- `table(columns, rows, digits, lower_better)`: the reports' table — numbers formatted with
  their column's `digits`, each column with a direction (True: lower is better, False: higher,
  None: no ranking) gets its best value in bold, numeric columns right-aligned.
- `distinct_labels(names, paths)`: row labels of models that are always distinct — a name shared
  by several gets the shortest tail of its path that tells them apart (`Tree (runs/a)`; a
  checkpoint named by its file, just the tail: `a/model.gguf`), the same path given twice a
  `#k`. Two inputs are two rows in every table, results.json and the bootstrap.
- `seed_table(results, rows, metrics, …)`: a row per method, a column per metric, mean ± SD over
  seeds, the best mean of each column bold, and an `n` column (the most seeds of any metric of
  the row) — the GTCA main and ablation layout.
"""

from __future__ import annotations

import math
import numbers
import pathlib
from typing import Any, Collection, Mapping, NamedTuple, Sequence

import numpy as np

DASH = "–"  # a missing value, in every table


def missing(value: Any) -> bool:
  """None, or a number that is NaN."""
  return value is None or (isinstance(value, numbers.Real) and math.isnan(value))


def number(value: float | None, digits: int, signed: bool = False) -> str:
  """`value` with `digits` decimals (`+` sign when `signed`); `DASH` when missing."""
  return DASH if missing(value) else f"{value:{'+' if signed else ''}.{digits}f}"


class MeanSD(NamedTuple):
  mean: float
  sd: float | None  # sample SD (ddof = 1); None for a single value
  n: int  # finite values


def mean_sd(values: Sequence[float | None]) -> MeanSD | None:
  """Mean and sample SD of the finite values (None and NaN left out); None when there is none."""
  finite = np.asarray([v for v in values if not missing(v) and math.isfinite(v)], np.float64)
  if not finite.size:
    return None
  sd = float(np.std(finite, ddof=1)) if finite.size > 1 else None
  return MeanSD(float(np.mean(finite)), sd, int(finite.size))


def mean_sd_text(stats: MeanSD | None, digits: int = 2) -> str:
  """`83.12 ± 0.41`; one value `83.12 (n=1)`; `DASH` when there is none."""
  if stats is None:
    return DASH
  if stats.sd is None:
    return f"{number(stats.mean, digits)} (n=1)"
  return f"{number(stats.mean, digits)} ± {number(stats.sd, digits)}"


def interval(value: float, ci: Sequence[float], digits: int, signed: bool = False) -> str:
  """`x [lo, hi]` (each with `digits` decimals, signed when `signed`)."""
  return (f"{number(value, digits, signed)} [{number(ci[0], digits, signed)}, "
          f"{number(ci[1], digits, signed)}]")


def p_text(p: float) -> str:
  """`p=.042`; `p<.001` below one in a thousand."""
  return "p<.001" if p < 0.001 else "p=" + f"{p:.3f}".lstrip("0")


def best_rows(values: Sequence[float | None], lower_better: bool, digits: int) -> set[int]:
  """Indices of the rows whose value, rounded to `digits`, is the best one; empty when fewer than
  two values are known or every known value ties."""
  known = [(round(v, digits), i) for i, v in enumerate(values)
           if isinstance(v, numbers.Real) and not missing(v)]
  if len(known) < 2:
    return set()
  rounded = {v for v, _ in known}
  if len(rounded) == 1:
    return set()
  best = (min if lower_better else max)(rounded)
  return {i for v, i in known if v == best}


def bold(cells: Sequence[str], rows: Collection[int]) -> list[str]:
  """The cells, those at `rows` in bold."""
  return [f"**{c}**" if i in rows else c for i, c in enumerate(cells)]


def _text(cell: Any) -> str:
  return cell if isinstance(cell, str) else DASH if missing(cell) else str(cell)


def header(columns: Sequence[Any], right_align: bool = False) -> str:
  """The header line and the alignment line of a table."""
  rule = ["---" if j == 0 or not right_align else "---:" for j in range(len(columns))]
  return row(columns) + "\n|" + "|".join(rule) + "|"


def row(cells: Sequence[Any]) -> str:
  """One table line."""
  return "| " + " | ".join(map(_text, cells)) + " |"


def markdown(columns: Sequence[Any], rows: Sequence[Sequence[Any]],
             right_align: bool = False) -> str:
  """A whole table (see `header` and `row`)."""
  return "\n".join([header(columns, right_align), *map(row, rows)])


def table(columns: Sequence[str], rows: Sequence[Sequence[float | None | str]],
          digits: Sequence[int], lower_better: Sequence[bool | None]) -> str:
  """The reports' table: numbers formatted per column, the best of each ranked column in bold,
  numeric columns right-aligned (module docstring)."""
  cells = [[c if isinstance(c, str) else number(c, digits[j]) for j, c in enumerate(r)]
           for r in rows]
  for j, direction in enumerate(lower_better):
    if direction is None:
      continue
    column = [r[j] if not isinstance(r[j], str) else None for r in rows]
    for i in best_rows(column, direction, digits[j]):
      cells[i][j] = f"**{cells[i][j]}**"
  return markdown(columns, cells, right_align=True)


def seed_table(results: Mapping[str, Mapping[str, Sequence[float]]], rows: Sequence[str],
               metrics: Sequence[str], *, first: str,
               row_names: Mapping[str, str] | None = None,
               metric_names: Mapping[str, str] | None = None,
               digits: Mapping[str, int] | None = None,
               lower_better: Collection[str] = (), unranked: Collection[str] = ()) -> str:
  """Rows (those present in `results`: row → metric → values over seeds) × metrics, each cell
  `mean_sd_text`, the best mean of each metric in bold (`lower_better` names the metrics where
  lower is better; `unranked` those never bold, such as sizes), then `n`: the most values any
  metric of the row has."""
  rows = [r for r in rows if r in results]
  digits = digits or {}
  columns = [first, *((metric_names or {}).get(m, m) for m in metrics), "n"]
  body = [[(row_names or {}).get(r, r)] for r in rows]
  for m in metrics:
    stats = [mean_sd(results[r].get(m, ())) for r in rows]
    places = digits.get(m, 2)
    cells = [mean_sd_text(s, places) for s in stats]
    best = (set() if m in unranked
            else best_rows([s and s.mean for s in stats], m in lower_better, places))
    for line, cell in zip(body, bold(cells, best)):
      line.append(cell)
  for r, line in zip(rows, body):
    line.append(str(max((len(results[r].get(m, ())) for m in metrics), default=0)))
  return markdown(columns, body)


def distinct_labels(names: Sequence[str], paths: Sequence[str]) -> list[str]:
  """`names` made distinct by their `paths` (module docstring)."""
  labels = list(names)
  parts = [pathlib.Path(p).resolve().parts[1:] for p in paths]  # without the root
  for name in set(names):
    group = [i for i, n in enumerate(names) if n == name]
    if len(group) < 2:
      continue
    for k in range(1, max(len(parts[i]) for i in group) + 1):
      tails = ["/".join(parts[i][-k:]) for i in group]
      if len(set(tails)) == len(tails):
        break
    else:  # the same path more than once: its name, numbered
      tails = ["/".join(parts[i][-1:]) for i in group]
    for rank, (i, tail) in enumerate(zip(group, tails)):
      shown = tail if tail == name or tail.endswith("/" + name) else f"{name} ({tail})"
      labels[i] = shown + (f" #{rank + 1}" if tails.count(tail) > 1 else "")
  return labels
