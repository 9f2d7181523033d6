"""Import onto a mesh of 4 forced CPU devices: each parameter is read slice by slice straight
into the shard the partition table gives it (no read larger than one device's share of a
sharded tensor), the shards hold the right values, and the sharded model gives transformers'
logits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests import xla_env
from tests.test_hf_import import hf_logits, make_hf_model  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_CHILD = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, {root!r})
    import jax, jax.numpy as jnp, numpy as np
    from slm_jax.hf import load, safetensors_io
    from slm_jax.hf.scoring import logits
    from slm_jax.train import sharding
    folder, ids_path, out_path = sys.argv[1:4]
    reads = []
    original = safetensors_io.CheckpointFiles.read
    def spy(self, name, index=None):
      array = original(self, name, index)
      reads.append((name, int(array.size), int(np.prod(self.info(name).shape))))
      return array
    safetensors_io.CheckpointFiles.read = spy
    mesh = sharding.make_mesh(data=1, fsdp=4)
    model = load.load_model(folder, compute_dtype=jnp.float32,
                            shardings=lambda tree: sharding.tree_shardings(tree, mesh))
    q = model.blocks[1].attn.q.kernel[...]
    full = np.asarray(q)
    shards = [(list(s.index[0].indices(full.shape[0])[:2]), s.data.shape[0])
              for s in q.addressable_shards]
    np.save(out_path, logits(model, np.load(ids_path)))
    print("RESULT " + json.dumps({{"devices": jax.device_count(), "reads": reads,
                                  "q_shards": shards, "q_spec": list(q.sharding.spec)}}))
""")


def test_import_reads_slices_into_shards(tmp_path):
  model = make_hf_model("llama", hidden_size=128, intermediate_size=256, vocab_size=256,
                        head_dim=32)
  folder = tmp_path / "ckpt"
  model.save_pretrained(folder, max_shard_size="200KB")
  ids = np.random.default_rng(0).integers(0, 256, (2, 50))
  np.save(tmp_path / "ids.npy", ids)
  script = tmp_path / "child.py"
  script.write_text(_CHILD.format(root=ROOT))
  env = xla_env.child_env(devices=4)
  done = subprocess.run([sys.executable, str(script), str(folder), str(tmp_path / "ids.npy"),
                         str(tmp_path / "out.npy")], capture_output=True, text=True, env=env,
                        timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  result = json.loads(next(l for l in done.stdout.splitlines() if l.startswith("RESULT "))[7:])
  assert result["devices"] == 4
  assert result["q_spec"] == ["fsdp", None]
  assert [bounds for bounds, _ in result["q_shards"]] == [[0, 32], [32, 64], [64, 96], [96, 128]]
  big = [(name, size, total) for name, size, total in result["reads"] if total >= 128 * 128]
  assert big and all(size * 4 <= total for _, size, total in big), big  # a quarter at most
  embed = [r for r in result["reads"] if r[0] == "model.embed_tokens.weight"]
  assert len(embed) == 4 and all(size == 64 * 128 for _, size, _ in embed)
  np.testing.assert_allclose(np.load(tmp_path / "out.npy"), hf_logits(model, ids), atol=1e-4)
