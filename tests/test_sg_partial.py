"""Finished SG suites of the run in flight are kept in results.partial.json; a killed evaluation
resumes without redoing them (eval.sg_partial, issue #35 item 4)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from slm_jax.eval.sg_partial import KEY, SuitesInFlight
from slm_jax.eval.syntaxgym import evaluate_syntaxgym
from slm_jax.identity import IdentityError
from tests.test_syntaxgym import ITEMS, PREDICTIONS, toy_prefix, write_suite

NAMES = ["number_toy", "npi_toy", "fgd_toy", "reflexive_toy"]
RUN = {"workdir": "/runs/tiny", "step": 400, "max_items": 3, "beam": 300}


class Killed(Exception):
  pass


def counting(limit: int | None = None):
  """toy_prefix with a call log; the call after `limit` calls raises (the evaluation killed)."""
  calls = []

  def prefix(sentences):
    if limit is not None and len(calls) == limit:
      raise Killed
    calls.append([tuple(s) for s in sentences])
    out = toy_prefix(sentences)
    # an unknown word: −inf, so the suite's surprisals are infinite (kept exactly)
    return [np.where(np.cumsum([w == "guitar" for w in s]) > 0, -np.inf, o) if "women" in s else o
            for s, o in zip(sentences, out)]

  return prefix, calls


@pytest.fixture
def folder(tmp_path):
  for i, name in enumerate(NAMES):
    write_suite(tmp_path / "json", name, ITEMS[i % 2:], PREDICTIONS)
  return tmp_path / "json"


def test_a_killed_evaluation_resumes_without_redoing_finished_suites(tmp_path, folder):
  full_fn, full_calls = counting()
  full = evaluate_syntaxgym(full_fn, folder, suites=NAMES)
  assert len(full_calls) == len(NAMES)
  path = tmp_path / "out" / "results.partial.json"
  path.parent.mkdir()
  path.write_text(json.dumps({"complete": False, "models": [{"name": "done before"}]}))

  kept = SuitesInFlight(path, RUN)
  assert kept.done == {} and kept.note == ""
  killed_fn, _ = counting(limit=2)  # the third suite's search is killed
  with pytest.raises(Killed):
    evaluate_syntaxgym(killed_fn, folder, suites=NAMES, done=kept.done, on_suite=kept.keep)
  saved = json.loads(path.read_text())
  assert saved["models"] == [{"name": "done before"}]  # the finished runs stay
  assert list(saved[KEY]["suites"]) == sorted(NAMES)[:2]
  assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # renamed into place

  again = SuitesInFlight(path, dict(RUN))
  assert list(again.done) == sorted(NAMES)[:2] and "2 finished SG suites reused" in again.note
  resumed_fn, resumed_calls = counting()
  resumed = evaluate_syntaxgym(resumed_fn, folder, suites=NAMES, done=again.done,
                               on_suite=again.keep)
  assert resumed_calls == full_calls[2:]  # only the unfinished suites were searched
  assert resumed["counts"].pop("reused_suites") == 2
  assert full["counts"].pop("reused_suites") == 0
  assert json.dumps(resumed, sort_keys=True) == json.dumps(full, sort_keys=True)  # inf kept
  assert any(np.isinf(x) for s in resumed["suites"].values() for item in s["surprisals"]
             for v in item.values() for x in v)
  assert list(json.loads(path.read_text())[KEY]["suites"]) == sorted(NAMES)


def test_saved_suites_of_another_run_or_setting_are_not_reused(tmp_path, folder):
  path = tmp_path / "results.partial.json"
  kept = SuitesInFlight(path, RUN)
  fn, _ = counting()
  evaluate_syntaxgym(fn, folder, suites=NAMES[:1], on_suite=kept.keep)
  other = SuitesInFlight(path, {**RUN, "max_items": None, "step": 500})
  assert other.done == {}
  assert "1 saved SG suites not reused" in other.note
  assert "max_items: 3 saved, None now; step: 400 saved, 500 now" in other.note
  path.write_text("[1, 2]")
  with pytest.raises(IdentityError, match="expected a JSON object"):
    SuitesInFlight(path, RUN)
