"""The one training loop on a tiny linear regression: exact resume, the non-finite stop (checked at
every step, nothing saved after it), progress windows without the first step, checkpoint cadences,
hooks that stop or checkpoint, the wall-time limit, and a GTCA-like checkpoint of part of the state
with its extra checked on resume."""

from __future__ import annotations

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from slm_jax import cli
from slm_jax.train import loop as loop_lib
from slm_jax.train.checkpointing import Checkpointer, CheckpointError
from slm_jax.train.loop import Action, Cadence, Hook, Loop, NonFiniteLossError, Persist
from slm_jax.train.metrics_io import MetricsWriter

W_TRUE = np.array([1.5, -2.0, 0.5], np.float32)


def batch_at(step: int) -> dict:
  """A pure function of the step (as fine-tuning's and GTCA's batches are)."""
  x = np.random.default_rng([7, step]).normal(size=(8, 3)).astype(np.float32)
  return {"x": x, "y": x @ W_TRUE}


@jax.jit
def sgd(w, x, y, lr):
  loss_fn = lambda w: jnp.sum((x @ w - y) ** 2)
  loss, grad = jax.value_and_grad(loss_fn)(w)
  return w - lr * grad / y.shape[0], {"loss_sum": loss, "count": jnp.float32(y.shape[0])}


def step_fn(state, batch, step):
  del step
  w, out = sgd(state["w"], batch["x"], batch["y"], 0.1)
  return {"w": w}, out


def new_loop(tmp_path, total=6, **kwargs) -> Loop:
  lines = kwargs.pop("lines", [])
  return Loop(Checkpointer(tmp_path / "checkpoints", max_to_keep=20),
              {"w": jnp.zeros(3, jnp.float32)}, total, log=lines.append, **kwargs)


def test_a_stopped_and_resumed_run_equals_an_uninterrupted_one(tmp_path):
  straight = new_loop(tmp_path / "a")
  writer = MetricsWriter(tmp_path / "a", tensorboard=False)
  whole = straight.run(step_fn, batch_at, cadence=Cadence(log_every=1, checkpoint_every=100),
                       writer=writer)
  writer.close()
  assert whole.stop == loop_lib.END and whole.step == 6 and straight.checkpointer.steps() == [6]

  first = new_loop(tmp_path / "b")
  part = first.run(step_fn, batch_at, cadence=Cadence(log_every=1, stop_after=4))
  assert part.stop == loop_lib.STOP_AFTER and first.checkpointer.steps() == [4]  # checkpointed
  first.checkpointer.close()
  lines = []
  second = new_loop(tmp_path / "b", lines=lines)
  assert second.resume() == 4 and "resumed from step 4" in lines[0]
  rest = second.run(step_fn, batch_at, cadence=Cadence(log_every=1))
  assert rest.start == 4 and rest.step == 6
  np.testing.assert_array_equal(np.asarray(rest.state["w"]), np.asarray(whole.state["w"]))
  assert rest.last_loss == whole.last_loss
  losses = [json.loads(line)["loss"] for line in (tmp_path / "a/metrics.jsonl").read_text()
            .splitlines()]
  assert len(losses) == 6 and losses[-1] < losses[0]


def nan_at(bad_step: int):
  def step(state, batch, step):
    state, out = step_fn(state, batch, step)
    if step + 1 == bad_step:
      out = {**out, "loss_sum": out["loss_sum"] * jnp.nan}
    return state, out
  return step


def test_a_non_finite_loss_at_a_step_that_logs_nothing_stops_there_and_saves_nothing_after(
    tmp_path):
  run = new_loop(tmp_path, total=8)
  with pytest.raises(NonFiniteLossError, match=r"non-finite loss \(nan\) at step 5; stopping "
                     r"without saving \(last checkpoint: step 4 in .*checkpoints\); lower it"):
    run.run(nan_at(5), batch_at, cadence=Cadence(log_every=100, checkpoint_every=1),
            hint="lower it")
  assert run.checkpointer.steps() == [1, 2, 3, 4]
  assert NonFiniteLossError("x").exit_code == cli.EXIT_NONFINITE
  first = new_loop(tmp_path / "first", total=8)
  with pytest.raises(NonFiniteLossError, match="at step 1;.*last checkpoint: none"):
    first.run(nan_at(1), batch_at, cadence=Cadence(checkpoint_every=1))
  assert first.checkpointer.steps() == []


def test_an_update_that_overflows_with_a_finite_loss_is_never_saved(tmp_path):
  """A step's loss is computed before its update: with a huge learning rate the loss of step 2 is
  finite while the parameters it leaves are not. The save of step 2 must refuse them."""
  def overflowing(state, batch, step):
    w, out = sgd(state["w"], batch["x"], batch["y"], 1e30 if step == 1 else 0.1)
    return {"w": w * jnp.float32(1e30) * jnp.float32(1e30) if step == 1 else w}, out
  run = new_loop(tmp_path, total=6)
  with pytest.raises(NonFiniteLossError, match=r"non-finite parameters after the update of step "
                     r"2 \(1 arrays, first \['w'\]\); stopping without saving \(last checkpoint: "
                     r"step 1 in .*checkpoints\); lower it"):
    run.run(overflowing, batch_at, cadence=Cadence(log_every=100, checkpoint_every=1),
            hint="lower it")
  assert run.checkpointer.steps() == [1]
  restored = run.checkpointer.restore_latest({"w": jnp.zeros(3, jnp.float32)})
  assert np.isfinite(np.asarray(restored.state["w"])).all()


def test_progress_lines_leave_out_the_first_step_and_come_at_epoch_ends(tmp_path):
  lines, windows = [], []

  def progress(window, step):
    windows.append((step, len(window.outs), window.timed))
    return {"loss": 0.0}, [f"rate {loop_lib.rate_text(window.per_second(), 'steps/s')}"]

  run = new_loop(tmp_path, total=7, lines=lines, label="toy ")
  run.run(step_fn, batch_at, cadence=Cadence(log_every=2, epoch_steps=3), progress=progress)
  assert [w[0] for w in windows] == [2, 3, 4, 6, 7]  # every 2 steps, epoch ends, the last step
  assert windows[0] == (2, 2, 1)  # the first step (compilation) is not timed
  assert all(timed == n for _, n, timed in windows[1:])
  assert lines[0].startswith("toy step 2/7 | rate ") and " | ETA " in lines[0]
  assert lines[-1].endswith("| ETA 0m00s")
  assert run.checkpointer.steps() == [3, 6, 7]  # epoch ends and the end
  one = []
  new_loop(tmp_path / "one", total=2, lines=one).run(step_fn, batch_at,
                                                     cadence=Cadence(log_every=1))
  assert "- steps/s" in one[0] and "ETA ?" in one[0]  # nothing timed yet after step 1


def test_hooks_run_where_asked_and_may_checkpoint_or_stop(tmp_path):
  seen = []

  def evaluate(step, state):
    seen.append((step, float(state["w"][0])))
    return Action(checkpoint=True, stop="early stop" if step == 4 else None)

  run = new_loop(tmp_path, total=10)
  result = run.run(step_fn, batch_at, hooks=[Hook(loop_lib.every(2, but=10), evaluate)])
  assert [s for s, _ in seen] == [2, 4] and result.stop == "early stop" and result.step == 4
  assert run.checkpointer.steps() == [2, 4]


def test_the_wall_time_limit_stops_checkpointed_and_seconds_cadence_saves(tmp_path):
  run = new_loop(tmp_path, total=50)
  result = run.run(step_fn, batch_at, cadence=Cadence(max_seconds=1e-9))
  assert result.stop == loop_lib.TIME and result.step == 1 and run.checkpointer.steps() == [1]
  timed = new_loop(tmp_path / "s", total=3)
  timed.run(step_fn, batch_at, cadence=Cadence(checkpoint_every_s=1e-9))
  assert timed.checkpointer.steps() == [1, 2, 3]


def test_part_of_the_state_is_checkpointed_and_its_extra_checked_on_resume(tmp_path):
  """GTCA's shape: a frozen part never written, the trained part and its extra (a digest)."""
  frozen = jnp.full(3, 9.0)
  state = {"w": jnp.zeros(3, jnp.float32), "frozen": frozen}

  def restore(digest):
    def rebuild(current, restored):
      if restored.extra["digest"] != digest:
        raise CheckpointError(f"trained on another backbone ({restored.extra['digest']})")
      return {"w": restored.state["w"], "frozen": current["frozen"]}
    return rebuild

  def persist(digest):
    return Persist(target=lambda s: {"w": s["w"]}, extra=lambda step: {"digest": digest},
                   restore=restore(digest))

  def step(s, batch, k):
    alpha = batch["alpha"]  # a per-step traced scalar travels in the batch
    w, out = sgd(s["w"], batch["x"] * alpha, batch["y"] * alpha, 0.1)
    return {"w": w, "frozen": s["frozen"]}, out

  with_alpha = lambda k: {**batch_at(k), "alpha": np.float32(min(1.0, (k + 1) / 2))}
  first = Loop(Checkpointer(tmp_path, max_to_keep=3), state, 4, persist=persist("abc"),
               log=lambda _: None)
  first.run(step, with_alpha, cadence=Cadence(stop_after=2))
  first.checkpointer.close()
  saved = (tmp_path / "2" / "state")
  assert list(json.loads((saved / "_METADATA").read_text())["tree_metadata"]) == ["('w',)"]
  again = Loop(Checkpointer(tmp_path, max_to_keep=3), state, 4, persist=persist("abc"),
               log=lambda _: None)
  assert again.resume() == 2
  assert again.run(step, with_alpha).state["frozen"] is frozen
  again.checkpointer.close()
  other = Loop(Checkpointer(tmp_path, max_to_keep=3), state, 4, persist=persist("xyz"),
               log=lambda _: None)
  with pytest.raises(CheckpointError, match="another backbone"):
    other.resume()


def test_fmt_seconds():
  assert loop_lib.fmt_seconds(65) == "1m05s" and loop_lib.fmt_seconds(3700) == "1h01m"
  assert loop_lib.fmt_seconds(math.inf) == "?"
