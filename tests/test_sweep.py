"""The one sweep: every item checked before the first trains, finished items reused only when
their record matches, a stop leaves the sweep resumable, progress lines with an ETA."""

from __future__ import annotations

import json

import pytest

from slm_jax import identity
from slm_jax.train.sweep import SweepItem, run_sweep


def items(tmp_path, lr=0.1):
  return [SweepItem(f"seed {s}", tmp_path / f"seed{s}", {"lr": lr, "seed": s}, s) for s in (1, 2)]


def trainer(calls, stop_at=None):
  def train(item):
    calls.append(item.key)
    if item.key == stop_at:
      return None
    item.folder.mkdir(parents=True, exist_ok=True)
    identity.write_record(item.folder / "record.json", item.identity)
    (item.folder / "done.json").write_text(json.dumps({"seed": item.key}))
    return {"seed": item.key}
  return train


def test_finished_items_are_reused_only_with_their_identity(tmp_path):
  calls, lines = [], []
  result = run_sweep(items(tmp_path), trainer(calls, stop_at=2), record="record.json",
                     marker="done.json", log=lines.append)
  assert not result.complete and result.results == [{"seed": 1}] and calls == [1, 2]
  assert lines[0].startswith("[1/2] seed 1 done; ") and "ETA" in lines[0]
  assert "[2/2] seed 2 stopped unfinished" in lines[1]
  calls, lines = [], []
  result = run_sweep(items(tmp_path), trainer(calls), record="record.json", marker="done.json",
                     log=lines.append, describe=lambda r: f"seed {r['seed']} ok")
  assert result.complete and calls == [2] and result.results == [{"seed": 1}, {"seed": 2}]
  assert lines[0] == f"[1/2] seed 1: finished earlier ({tmp_path / 'seed1' / 'done.json'}), reused"
  assert lines[1].startswith("[2/2] seed 2 done: seed 2 ok; ")
  calls = []
  with pytest.raises(identity.IdentityError, match=r"seed1 holds another seed 1 \(lr: 0.1 "
                     r"recorded there, 0.2 now\)"):
    run_sweep(items(tmp_path, lr=0.2), trainer(calls), record="record.json", marker="done.json")
  assert calls == []  # refused before anything trained
  (tmp_path / "seed2" / "record.json").unlink()
  with pytest.raises(identity.IdentityError, match=r"seed2: finished \(done.json\) but without "
                     r"its record"):
    run_sweep(items(tmp_path), trainer(calls), record="record.json", marker="done.json")
  assert calls == []
