"""Restore onto another mesh: a checkpoint written on 4 (forced host CPU) devices with fsdp 2
resumes on 2 devices (fsdp 1) and on 8 (fsdp 4) with bit-identical parameters, placed where the
new mesh's partition table puts them, and the same next losses; a checkpoint of another model
shape is a clear `CheckpointMismatchError`, and stays where it is."""

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
from flax import nnx

from slm_jax.model.decoder import Decoder
from slm_jax.train import checkpointing, trainer
from slm_jax.train.checkpointing import CheckpointMismatchError, Checkpointer
from tests import xla_env
from tests.test_train import losses, small_config

ROOT = pathlib.Path(__file__).resolve().parents[1]
OVERRIDES = {"train.checkpoint_every": 3, "optimizer.grad_accum_steps": 2}

_CHILD = textwrap.dedent("""
    import hashlib, json, pathlib, sys
    devices, fsdp, workdir = int(sys.argv[1]), int(sys.argv[2]), pathlib.Path(sys.argv[3])
    sys.path.insert(0, {root!r})
    import jax
    import numpy as np
    from slm_jax.train import checkpointing, sharding, state, trainer
    from tests.test_train import small_config

    def digest(params):
      leaves = jax.tree_util.tree_flatten_with_path(params)[0]
      h = hashlib.sha256()
      for path, x in sorted(leaves, key=lambda item: sharding.path_string(item[0])):
        h.update(sharding.path_string(path).encode() + np.asarray(x).tobytes())
      return h.hexdigest()

    seen = {{}}
    restore = checkpointing.Checkpointer.restore_latest
    def spying_restore(self, *args, **kwargs):  # the parameters as restored onto this mesh
      restored = restore(self, *args, **kwargs)
      if restored is not None:
        q = restored.state["params"]["blocks"][0]["attn"]["q"]["kernel"]
        seen["restored"] = digest(restored.state["params"])
        seen["restored_q_shard"] = list(q.addressable_shards[0].data.shape)
      return restored
    checkpointing.Checkpointer.restore_latest = spying_restore
    make = state.make_train_step  # the one set-up builds every trainer's step
    def spying_make(*args, **kwargs):  # the parameters after the third update
      step = make(*args, **kwargs)
      calls = []
      def spy(params, opt_state, batch):
        out = step(params, opt_state, batch)
        calls.append(1)
        if len(calls) == 3:
          seen["after_3"] = digest(out[0])
        return out
      return spy
    state.make_train_step = spying_make
    cfg = small_config("tgtree", steps=6, **{{"mesh.fsdp": fsdp, **{overrides!r}}})
    trainer.train(cfg, workdir)
    print("SEEN " + json.dumps(seen))
""")


def _child(tmp_path, devices: int, fsdp: int, workdir: pathlib.Path) -> dict:
  script = tmp_path / "child.py"
  script.write_text(_CHILD.format(root=str(ROOT), overrides=OVERRIDES))
  env = xla_env.child_env(devices=devices)
  done = subprocess.run([sys.executable, str(script), str(devices), str(fsdp), str(workdir)],
                        capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
  assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
  assert f"'data': {devices // fsdp}, 'fsdp': {fsdp}" in done.stdout
  return json.loads(next(l for l in done.stdout.splitlines() if l.startswith("SEEN "))[5:])


@pytest.mark.slow  # three child processes, 4 -> 2 and 4 -> 8 devices (~90 s on 2 cores)
def test_a_four_device_checkpoint_resumes_on_two_and_on_eight_devices(tmp_path):
  written = tmp_path / "four"
  first = _child(tmp_path, 4, 2, written)  # checkpoints at steps 3 and 6, on fsdp 2
  shutil.rmtree(written / "checkpoints" / "6")
  want = losses(written)
  assert [s for s, _ in want] == [1, 2, 3, 4, 5, 6]
  for devices, fsdp in [(2, 1), (8, 4)]:
    workdir = tmp_path / f"on{devices}"
    shutil.copytree(written, workdir)
    seen = _child(tmp_path, devices, fsdp, workdir)  # resumes from step 3 on the other mesh
    assert seen["restored"] == first["after_3"], (devices, "parameters differ after restore")
    assert seen["restored_q_shard"] == [64 // fsdp, 64]  # split as this mesh's table says
    got = losses(workdir)
    assert [s for s, _ in got] == [1, 2, 3, 4, 5, 6]
    np.testing.assert_allclose([l for _, l in got], [l for _, l in want], rtol=2e-5)


def test_a_checkpoint_of_another_model_shape_is_a_clear_error(tmp_path):
  trainer.train(small_config("tgtree", steps=3, **{"train.checkpoint_every": 3}), tmp_path)
  wider = small_config("tgtree", steps=3, **{"model.d_model": 96})
  model = Decoder(wider.model.replace(vocab_size=480), rngs=nnx.Rngs(0))
  params = nnx.to_pure_dict(nnx.split(model, nnx.Param)[1])
  checkpointer = Checkpointer(tmp_path / "checkpoints")
  with pytest.raises(CheckpointMismatchError) as error:
    checkpointer.restore_latest({"params": params, "opt_state": {}})
  message = str(error.value)
  assert "checkpoint step 3" in message and "another model shape" in message
  assert "blocks/0/attn/q/kernel: (64, 64) saved, (96, 96) now" in message
  assert checkpointer.steps() == [3]  # not moved aside as unreadable
  checkpointer.close()
  assert checkpointing.layout_mismatch(params, params) == []
