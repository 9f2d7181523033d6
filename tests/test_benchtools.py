"""The benchmarks' shared helpers: timing calls the function as asked, tables, flag spelling."""

from __future__ import annotations

from slm_jax import benchtools


def test_timing_calls_and_results():
  calls = []
  seconds, result = benchtools.best_of(3, lambda: calls.append(1) or len(calls))
  assert len(calls) == 3 and result == 3 and seconds >= 0
  calls.clear()
  seconds, result = benchtools.median_of(4, lambda: calls.append(1) or len(calls), warmup=2)
  assert len(calls) == 6 and result == 6 and seconds >= 0


def test_table_and_parser():
  assert benchtools.table(["a", "b"], [[1, 2.5]]) == "| a | b |\n|---|---|\n| 1 | 2.5 |"
  parser = benchtools.parser("doc")
  parser.add_argument("--row_length", type=int, default=1)
  assert parser.parse_args(["--row-length=5"]).row_length == 5
  assert parser.parse_args(["--row_length=6"]).row_length == 6


def test_split_names_keeps_commas_inside_parentheses():
  assert benchtools.split_names("tg:2048,mix(causal,tg):2048, causal,") == [
      "tg:2048", "mix(causal,tg):2048", "causal"]
  assert benchtools.split_names("") == []
