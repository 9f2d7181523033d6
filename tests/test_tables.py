"""The one table writer: cells (missing values, mean ± SD, intervals, p), bold-best, whole tables
(the reports' layout and GTCA's seed layout), checked against hand-written text."""

from __future__ import annotations

import math
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slm_jax import tables
from slm_jax.tables import DASH


def test_numbers_and_missing_values():
  assert tables.number(3.14159, 2) == "3.14"
  assert tables.number(2, 3) == "2.000"
  assert tables.number(0.5, 2, signed=True) == "+0.50"
  assert tables.number(-0.5, 2, signed=True) == "-0.50"
  for missing in (None, float("nan")):
    assert tables.number(missing, 2) == DASH
  assert tables.row(["a", None, float("nan"), 1.5, 7]) == f"| a | {DASH} | {DASH} | 1.5 | 7 |"


def test_mean_and_sample_sd():
  stats = tables.mean_sd([22.0, 22.1, 21.9])
  assert stats.mean == pytest.approx(22.0) and stats.sd == pytest.approx(0.1) and stats.n == 3
  assert tables.mean_sd([66.0, 68.0]).sd == pytest.approx(math.sqrt(2.0))  # ddof = 1
  assert tables.mean_sd([66.7]) == (66.7, None, 1)  # one value: no SD exists
  assert tables.mean_sd([5.0, None, float("nan"), float("inf")]) == (5.0, None, 1)
  assert tables.mean_sd([]) is None and tables.mean_sd([None, float("nan")]) is None


def test_mean_sd_text_one_form_for_a_single_value():
  assert tables.mean_sd_text(tables.mean_sd([83.0, 83.2])) == "83.10 ± 0.14"
  assert tables.mean_sd_text(tables.mean_sd([83.123])) == "83.12 (n=1)"
  assert tables.mean_sd_text(tables.mean_sd([0.1234]), 3) == "0.123 (n=1)"
  assert tables.mean_sd_text(None) == DASH


def test_interval_and_p():
  assert tables.interval(1.234, (0.5, 2.0), 2) == "1.23 [0.50, 2.00]"
  assert tables.interval(1.0, (-0.25, 2.0), 1, signed=True) == "+1.0 [-0.2, +2.0]"
  assert tables.p_text(0.0421) == "p=.042"
  assert tables.p_text(1.0) == "p=1.000"
  assert tables.p_text(0.0004) == "p<.001"


def test_best_rows_at_the_shown_precision():
  assert tables.best_rows([1.0, 3.0, 2.0], lower_better=False, digits=2) == {1}
  assert tables.best_rows([1.0, 3.0, 2.0], lower_better=True, digits=2) == {0}
  assert tables.best_rows([3.001, 3.0, 2.0], lower_better=False, digits=2) == {0, 1}  # tie
  assert tables.best_rows([3.0, 3.001], lower_better=False, digits=2) == set()  # all tie
  assert tables.best_rows([None, 3.0, float("nan")], lower_better=False, digits=2) == set()
  assert tables.best_rows([None, 3.0, 1.0], lower_better=False, digits=2) == {1}
  assert tables.bold(["a", "b", "c"], {0, 2}) == ["**a**", "b", "**c**"]


@given(st.lists(st.one_of(st.none(), st.floats(-1e6, 1e6)), max_size=8), st.booleans(),
       st.integers(0, 3))
def test_best_rows_hold_the_extreme(values, lower_better, digits):
  best = tables.best_rows(values, lower_better, digits)
  known = {round(v, digits) for v in values if v is not None}
  if len(known) < 2:
    assert best == set()
    return
  extreme = (min if lower_better else max)(known)
  assert best == {i for i, v in enumerate(values) if v is not None and round(v, digits) == extreme}


@given(st.lists(st.floats(-1e3, 1e3), min_size=2, max_size=10))
def test_mean_sd_matches_the_statistics_module(values):
  stats = tables.mean_sd(values)
  assert stats.n == len(values)
  assert stats.mean == pytest.approx(statistics.fmean(values), abs=1e-9)
  assert stats.sd == pytest.approx(statistics.stdev(values), abs=1e-6)


def test_markdown_layouts():
  assert tables.markdown(["a", "b"], [[1, 2.5]]) == "| a | b |\n|---|---|\n| 1 | 2.5 |"
  assert tables.markdown(["a", "b", "c"], [["x", "1", "2"]], right_align=True) == (
      "| a | b | c |\n|---|---:|---:|\n| x | 1 | 2 |")
  printed = "\n".join([tables.header(["a", "b"]), tables.row([1, 2.5])])
  assert printed == tables.markdown(["a", "b"], [[1, 2.5]])


def test_report_table_formats_and_bolds_each_ranked_column():
  text = tables.table(["Model", "Acc↑", "PPL↓", "Note"],
                      [["A", 70.0, 30.1234, "x"], ["B", 71.0, None, "y"], ["C", None, 29.5, "z"]],
                      [0, 2, 3, 0], [None, False, True, None])
  assert text == ("| Model | Acc↑ | PPL↓ | Note |\n"
                  "|---|---:|---:|---:|\n"
                  "| A | 70.00 | 30.123 | x |\n"
                  f"| B | **71.00** | {DASH} | y |\n"
                  f"| C | {DASH} | **29.500** | z |")


def test_seed_table_is_the_gtca_layout():
  results = {"backbone": {"toy": [50.0], "drift": []},
             "gtca": {"toy": [66.0, 64.0, 65.0], "drift": [0.05, 0.07]},
             "no_gate": {"toy": [55.0, 57.0], "drift": [0.2, 0.3]}}
  text = tables.seed_table(results, ["backbone", "lora_only", "gtca", "no_gate"],
                           ["toy", "drift"], first="Method",
                           row_names={"backbone": "Backbone", "gtca": "GTCA"},
                           metric_names={"toy": "Toy↑", "drift": "Drift↓"},
                           digits={"drift": 3}, lower_better={"drift"})
  assert text == ("| Method | Toy↑ | Drift↓ | n |\n"
                  "|---|---|---|---|\n"
                  f"| Backbone | 50.00 (n=1) | {DASH} | 1 |\n"  # no row for the absent lora_only
                  "| GTCA | **65.00 ± 1.00** | **0.060 ± 0.014** | 3 |\n"
                  "| no_gate | 56.00 ± 1.41 | 0.250 ± 0.071 | 2 |")
