"""GTCA training: backbone preparation, the frozen check, stage plans, chaining and resuming."""

from __future__ import annotations

import collections
import json
import shutil

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
from flax import nnx

from slm_jax import cli
from slm_jax.gtca import train
from slm_jax.gtca.toy_task import make_toy_task
from slm_jax.model.config import ModelConfig
from slm_jax.model.decoder import Decoder
from slm_jax.tokenizer import Tokenizer, WordVocab
from slm_jax.train.params import backbone_check, fingerprints


@pytest.fixture(scope="module")
def tiny():
  tokenizer = Tokenizer(WordVocab(["<unk>", "the", ".", "is", "are", "keys", "key"]))
  cfg = ModelConfig(vocab_size=tokenizer.vocab_size, d_model=16, n_layers=2, n_heads=2,
                    mlp_ratio=2)
  return Decoder(cfg, rngs=nnx.Rngs(0)), tokenizer


@pytest.fixture(scope="module")
def task():
  return make_toy_task(train=8, dev=2, test=4, seed=0)


def _flat(model):
  return {jax.tree_util.keystr(p, simple=True, separator="/"): np.asarray(x) for p, x in
          jax.tree_util.tree_flatten_with_path(nnx.to_pure_dict(nnx.state(model, nnx.Param)))[0]}


def test_prepare_backbone_extends_the_vocabulary_and_copies_every_array(tiny):
  model, tokenizer = tiny
  backbone = train.prepare_backbone(model, tokenizer, seed=3)
  assert backbone.added_words == ("Question:", "Options:", "Answer:", "___", "A.", "B.", "A", "B")
  old, new = _flat(model), _flat(backbone.decoder)
  v = tokenizer.vocab_size
  for name, array in old.items():
    got = new[name][:v] if name == "embed_tokens/embedding" else new[name]
    assert got.tobytes() == array.tobytes(), name
  table = new["embed_tokens/embedding"]
  assert table.shape == (v + 8, 16)
  norms = np.linalg.norm(table[v:], axis=1)
  np.testing.assert_allclose(norms, np.linalg.norm(old["embed_tokens/embedding"], axis=1).max(),
                             rtol=1e-5)
  assert any(n.endswith("lora_a") for n in new) and backbone.decoder.config.lora_rank == 8
  assert backbone.letter_ids == (v + 6, v + 7)
  ids, _ = backbone.text_tokenizer.encode("Question: the keys ___ .")
  assert ids.tolist() == [v, 1, 5, v + 3, 2]
  with pytest.raises(ValueError, match="word-level"):
    train.prepare_backbone(model, type("T", (), {"base": object()})())


def test_frozen_backbone_check_detects_a_changed_array(tiny):
  model, tokenizer = tiny
  backbone = train.prepare_backbone(model, tokenizer)
  params = nnx.to_pure_dict(nnx.state(backbone.decoder, nnx.Param))
  prints = fingerprints(params, "lora")
  assert backbone_check(prints, params, "lora")[0]
  lora_changed = jax.tree_util.tree_map_with_path(
      lambda p, x: x + 1 if "lora_b" in jax.tree_util.keystr(p) else x, params)
  assert backbone_check(prints, lora_changed, "lora")[0]  # adapters may change
  kernel = params["blocks"][1]["mlp"]["down"]["kernel"]
  params["blocks"][1]["mlp"]["down"]["kernel"] = kernel.at[3, 2].set(
      np.nextafter(np.float32(kernel[3, 2]), np.float32(np.inf)))  # one ulp
  ok, line = backbone_check(prints, params, "lora")
  assert not ok and "blocks/1/mlp/down/kernel" in line


def test_plans_and_alpha_ramp():
  settings = lambda method, **kw: train.Settings("b", "o", method, stage_steps=(10, 20, 30), **kw)
  assert [s.name for s in train.plan(settings("gtca"))] == ["lora", "gtca", "joint"]
  assert [(s.trainable, s.steps) for s in train.plan(settings("gtca"))] == [
      ("lora", 10), ("gtca", 20), ("lora,gtca", 30)]
  assert [(s.trainable, s.steps) for s in train.plan(settings("lora_only"))] == [("lora", 60)]
  assert [(s.trainable, s.steps) for s in train.plan(settings("direct_joint"))] == [
      ("lora,gtca", 60)]
  assert train.plan(settings("backbone")) == []
  stage2 = train.plan(settings("gtca"))[1]
  assert [round(stage2.alpha(s), 4) for s in (0, 1, 5)] == [0.075, 0.15, 0.15]
  ramp = train.ramp(0.15, 100)
  assert [round(ramp(s), 4) for s in (0, 4, 9, 10, 99)] == [0.015, 0.075, 0.15, 0.15, 0.15]
  assert train.plan(settings("gtca"))[0].alpha(5) == 0.0
  assert train.eval_alpha(settings("lora_only")) == 0 and train.eval_alpha(settings("gtca")) == 0.15
  assert settings("gtca", ablation="no_gate").name == "no_gate"
  with pytest.raises(ValueError, match="applies to method gtca"):
    settings("lora_only", ablation="no_gate")
  with pytest.raises(ValueError, match="method 'bert'"):
    settings("bert")
  assert train.variant("permuted_trees") == ("gtca", "permuted_trees")
  with pytest.raises(cli.CliError, match="unknown method"):
    train.variant("none")


def test_batch_order_is_a_function_of_seed_stage_and_step():
  steps = [train.batch_indices(10, 4, s, seed=1, stage=0) for s in range(5)]  # 20 rows: 2 epochs
  flat = np.concatenate(steps)
  assert sorted(flat[:10]) == list(range(10)) and sorted(flat[10:]) == list(range(10))
  assert np.array_equal(train.batch_indices(10, 4, 3, 1, 0), steps[3])
  assert not np.array_equal(train.batch_indices(10, 4, 3, 1, 1), steps[3])


def _adapters(out, stage):
  """The newest checkpoint of a stage folder, restored without a target (numpy arrays)."""
  folder = sorted((out / stage).iterdir(), key=lambda p: int(p.name))[-1]
  return ocp.StandardCheckpointer().restore(folder / "state")["adapters"]


def _leaves(tree, needle):
  return [np.asarray(x) for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]
          if needle in jax.tree_util.keystr(p)]


@pytest.mark.slow  # three Orbax-chained stages, twice (~55 s); the steps are tested one by one above
def test_stages_chain_resume_and_keep_the_backbone(tmp_path, tiny, task, monkeypatch):
  """Two stages of the gtca plan (LoRA, then GTCA only: two compilations keep the test short;
  `test_plans_and_alpha_ramp` checks the real plan's three)."""
  model, tokenizer = tiny
  real = train.plan
  monkeypatch.setattr(train, "plan", lambda settings: real(settings)[:2])
  out = tmp_path / "run"
  settings = train.Settings("tiny", str(out), "gtca", stage_steps=(2, 2, 2), batch_size=4,
                            checkpoint_every=1, log_every=1, blimp_pairs=False)
  lines = []
  result = train.run(settings, lines.append, backbone=train.prepare_backbone(model, tokenizer),
                     task=task)
  assert len(result["backbone_checks"]) == 2
  assert all("bitwise equal" in line for line in result["backbone_checks"])
  assert [s["stage"] for s in result["stages"]] == ["lora", "gtca"]
  assert set(result["metrics"]) >= {"toy", "dev", "drift", "toy_pp"}
  saved = json.loads((out / "result.json").read_text())
  assert saved["metrics"] == result["metrics"] and saved["method"] == "gtca"
  # chaining: stage 2 starts from stage 1's LoRA and trains only GTCA
  s1, s2 = (_adapters(out, d) for d in ("stage1_lora", "stage2_gtca"))
  assert any(np.abs(a).max() > 0 for a in _leaves(s1, "lora_b"))  # stage 1 trained LoRA
  for a, b in zip(_leaves(s1, "lora_b"), _leaves(s2, "lora_b")):
    assert a.tobytes() == b.tobytes()
  assert any(a.tobytes() != b.tobytes() for a, b in zip(_leaves(s1, "'o'"), _leaves(s2, "'o'")))
  # resume: stage 2 lost its last step; stage 1 is complete and is not retrained
  shutil.rmtree(out / "stage2_gtca" / "2")
  (out / "result.json").unlink()
  lines = []
  again = train.run(settings, lines.append, backbone=train.prepare_backbone(model, tokenizer),
                    task=task)
  assert any("stage 1 (lora): resumed at step 2/2" in line for line in lines)
  assert any("stage 2 (gtca): resumed at step 1/2" in line for line in lines)
  assert not any("stage 1 (lora) step" in line for line in lines)
  assert any("stage 2 (gtca) step 2/2" in line for line in lines)
  assert again["metrics"] == result["metrics"]  # the resumed run is the same run
  # a checkpoint of another backbone is refused
  other = Decoder(model.config, rngs=nnx.Rngs(5))
  (out / "result.json").unlink()
  with pytest.raises(Exception, match="another backbone"):
    train.run(settings, lines.append, backbone=train.prepare_backbone(other, tokenizer), task=task)


def test_toy_rows_are_cut_from_the_left_to_the_backbone_context(tiny, task):
  """A backbone's context bounds the whole row: the prompt is cut from the left so prompt +
  answer letter ≤ context, and the cut rows are counted."""
  model, tokenizer = tiny
  items = task.splits["test"]
  free = train.encode_items(items, train.prepare_backbone(model, tokenizer), "gold", 0)
  limit = min(len(e.ids_T) for e in free) - 3
  tally = collections.Counter()
  cut = train.encode_items(items, train.prepare_backbone(model, tokenizer, context=limit),
                           "gold", 0, tally)
  assert tally["truncated"] == len(items)
  for a, b in zip(free, cut):
    assert len(b.ids_T) == limit and b.ids_T[-1] == a.ids_T[-1]  # the letter is kept
    assert b.ids_T[:-1].tolist() == a.ids_T[:-1][-(limit - 1):].tolist()
    assert b.tree.n_tokens == limit - 1
