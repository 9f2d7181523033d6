"""Mesh and partitioning: the table's specs, and training on 4 (forced host) CPU devices —
data-parallel and FSDP — gives the single-device loss curve, keeps parameters where the table
puts them, checkpoints sharded state and resumes from it."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from slm_jax.train import run_config as config_builder
from slm_jax.train import sharding, trainer
from tests import xla_env
from tests.test_train import losses, small_config

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_one_device_mesh_and_errors():
  mesh = sharding.make_mesh()
  assert dict(mesh.shape) == {"data": jax.device_count(), "fsdp": 1}
  with pytest.raises(sharding.MeshError, match="devices"):
    sharding.make_mesh(data=jax.device_count() + 1)
  with pytest.raises(sharding.MeshError, match="fsdp"):
    sharding.make_mesh(fsdp=0)
  with pytest.raises(sharding.MeshError, match="micro-batches of 2.5 rows"):
    sharding.check_batch(10, 4, mesh)
  with pytest.raises(sharding.MeshError, match="not one of"):
    sharding.initialize_distributed("sometimes")
  assert sharding.initialize_distributed("off") is False


def test_config_validation_names_mesh_keys():
  cfg = config_builder.build("tg", "tiny")
  with cfg.unlocked():
    cfg.mesh.fsdp = 0
    cfg.mesh.distributed = "maybe"
  with pytest.raises(config_builder.ConfigError) as error:
    config_builder.validate(cfg)
  assert "mesh.fsdp" in str(error.value) and "mesh.distributed" in str(error.value)


_CHILD = textwrap.dedent("""
    import json, pathlib, sys
    sys.path.insert(0, {root!r})
    import jax
    from slm_jax.train import sharding, state, trainer
    from tests.test_train import small_config
    workdir, fsdp, steps = pathlib.Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    overrides = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {{}}
    cfg = small_config("tgnomask_mix_tg", steps=steps, **{{"mesh.fsdp": fsdp,
                       "train.checkpoint_every": 3, "optimizer.grad_accum_steps": 2,
                       "eval.batch_size": 6, **overrides}})
    seen = {{}}
    make = state.make_train_step  # the one set-up builds every trainer's step
    def spying_make(*args, **kwargs):  # records where the trainer really put params and batches
      step = make(*args, **kwargs)
      def spy(params, opt_state, batch):
        if not seen:
          for path, x in jax.tree_util.tree_flatten_with_path(params)[0]:
            seen[sharding.path_string(path)] = list(x.addressable_shards[0].data.shape)
          seen["batch"] = list(batch["tokens"].addressable_shards[0].data.shape)
        return step(params, opt_state, batch)
      return spy
    state.make_train_step = spying_make
    summary = trainer.train(cfg, workdir)
    print("EVAL", repr(summary.eval_loss), repr(summary.eval_terminal_ppl))
    mesh = sharding.make_mesh(cfg.mesh.data, cfg.mesh.fsdp)
    print("SHARDS " + json.dumps(seen))
    print("DEVICES", jax.device_count(), dict(mesh.shape))
""")


def _child(tmp_path, workdir, fsdp: int, steps: int, overrides: dict | None = None
           ) -> tuple[dict, str]:
  script = tmp_path / "child.py"
  script.write_text(_CHILD.format(root=str(ROOT)))
  env = xla_env.child_env(devices=4)
  done = subprocess.run([sys.executable, str(script), str(workdir), str(fsdp), str(steps),
                         json.dumps(overrides or {})],
                        capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
  assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
  shards = json.loads(next(l for l in done.stdout.splitlines() if l.startswith("SHARDS "))[7:])
  return shards, done.stdout


@pytest.mark.slow  # 4 forced devices, fsdp 1 and 2; in CI: tests/test_restore_mesh.py (4-device fsdp 2 training and resume) and tests/test_multiprocess.py
@pytest.mark.parametrize("fsdp", [1, 2])
def test_four_devices_match_one_device_and_resume(fsdp, tmp_path):
  single = tmp_path / "single"
  reference = trainer.train(small_config("tgnomask_mix_tg", steps=6, **{
      "train.checkpoint_every": 3, "optimizer.grad_accum_steps": 2, "eval.batch_size": 6}), single)
  sharded = tmp_path / "sharded"
  _child(tmp_path, sharded, fsdp, steps=6)  # checkpoints at steps 3 and 6 …
  shutil.rmtree(sharded / "checkpoints" / "6")  # … lose the last one …
  shards, out = _child(tmp_path, sharded, fsdp, steps=6)  # … and resume from the sharded step 3
  assert f"DEVICES 4 {{'data': {4 // fsdp}, 'fsdp': {fsdp}}}" in out
  assert "resumed from step 3" in out
  want, got = losses(single), losses(sharded)
  assert [s for s, _ in got] == [1, 2, 3, 4, 5, 6]
  np.testing.assert_allclose([l for _, l in got], [l for _, l in want], rtol=2e-5)
  # held-out batches of 6 rows do not split over 4 devices: padded with target-free rows
  eval_loss, eval_ppl = map(float, next(l for l in out.splitlines() if l.startswith("EVAL "))
                            .split()[1:])
  np.testing.assert_allclose([eval_loss, eval_ppl],
                             [reference.eval_loss, reference.eval_terminal_ppl], rtol=2e-5)
  # per-device shard shapes the trainer really used (d_model 64, 4 heads × 16, vocab 480)
  assert shards["batch"] == [8 // 4, 128]  # rows split over all 4 devices
  assert shards["blocks/0/attn/q/kernel"] == [64 // fsdp, 64]
  assert shards["blocks/0/attn/o/kernel"] == [64, 64 // fsdp]
  assert shards["embed_tokens/embedding"] == [480 // fsdp, 64]
  assert shards["final_norm/weight"] == [64]  # replicated


def test_batch_layout_pads_micro_batches_to_the_devices():
  assert sharding.batch_layout(8, 2, 4) == (8, 2, 4, 8)  # splits: used as is
  # the 1b config's 1014 rows in 169 micro-batches of 6 on 8 devices: 127 micro-batches of 8
  assert sharding.batch_layout(1014, 169, 8) == (1014, 127, 8, 1016)
  assert sharding.batch_layout(6, 1, 4) == (6, 1, 8, 8)
  for rows, accumulation, devices in [(66, 3, 4), (1014, 169, 32), (10, 5, 3)]:
    layout = sharding.batch_layout(rows, accumulation, devices)
    assert layout.micro_rows % devices == 0 and layout.padded_rows >= rows
    assert layout.padded_rows == layout.accumulation * layout.micro_rows
    assert layout.padded_rows - rows < layout.micro_rows  # less than one micro-batch of padding


@pytest.mark.slow  # another 4-device run; padding rows are checked in CI by test_batch_layout tests
def test_batch_that_does_not_split_over_four_devices_trains_as_on_one(tmp_path):
  """12 rows in 2 micro-batches of 6 on 4 devices run as 2 micro-batches of 8, 4 rows of
  padding without targets: the same losses as one device."""
  overrides = {"train.global_batch": 12, "optimizer.grad_accum_steps": 2}
  single = tmp_path / "single"
  trainer.train(small_config("tgnomask_mix_tg", steps=3, **{
      "train.checkpoint_every": 3, "eval.batch_size": 6, **overrides}), single)
  shards, out = _child(tmp_path, tmp_path / "sharded", 1, steps=3, overrides=overrides)
  assert "2 micro-batches of 8 rows, 4 of them padding" in out
  assert shards["batch"] == [16 // 4, 128]
  np.testing.assert_allclose([l for _, l in losses(tmp_path / "sharded")],
                             [l for _, l in losses(single)], rtol=2e-5)
