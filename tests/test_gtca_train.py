"""GTCA training: backbone preparation, the frozen check, stage plans, the stage optimizer, batch
order, chaining and resuming (also from a checkpoint of the optimizer-state layout before GTCA
trained through `train.steps`), the loop (progress line, NaN stop) and the stage identity."""

from __future__ import annotations

import collections
import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest
from flax import nnx

from slm_jax import cli
from slm_jax.gtca import batches, plans, runs, stages, toy_encoding
from slm_jax.gtca.backbone import prepare_backbone
from slm_jax.gtca.model import changed_arrays, params_of
from slm_jax.gtca.toy_task import make_toy_task
from slm_jax.model.config import ModelConfig
from slm_jax.model.decoder import Decoder
from slm_jax.tokenizer import Tokenizer, WordVocab
from slm_jax.train import state as train_state, step_cache
from slm_jax.train.checkpointing import Checkpointer, CheckpointError
from slm_jax.identity import IdentityError
from slm_jax.train.loop import NonFiniteLossError
from slm_jax.train.params import backbone_check, fingerprints
from slm_jax.train.optimizer import make_schedule, trainable_mask


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
  backbone = prepare_backbone(model, tokenizer, seed=3)
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
    prepare_backbone(model, type("T", (), {"base": object()})())


def test_frozen_backbone_check_detects_a_changed_array(tiny):
  model, tokenizer = tiny
  backbone = prepare_backbone(model, tokenizer)
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
  settings = lambda method, **kw: plans.Settings("b", "o", method, stage_steps=(10, 20, 30), **kw)
  assert [s.name for s in plans.plan(settings("gtca"))] == ["lora", "gtca", "joint"]
  assert [(s.trainable, s.steps) for s in plans.plan(settings("gtca"))] == [
      ("lora", 10), ("gtca", 20), ("lora,gtca", 30)]
  assert [(s.trainable, s.steps) for s in plans.plan(settings("lora_only"))] == [("lora", 60)]
  assert [(s.trainable, s.steps) for s in plans.plan(settings("direct_joint"))] == [
      ("lora,gtca", 60)]
  assert plans.plan(settings("backbone")) == []
  stage2 = plans.plan(settings("gtca"))[1]
  assert [round(stage2.alpha(s), 4) for s in (0, 1, 5)] == [0.075, 0.15, 0.15]
  ramp = plans.ramp(0.15, 100)
  assert [round(ramp(s), 4) for s in (0, 4, 9, 10, 99)] == [0.015, 0.075, 0.15, 0.15, 0.15]
  assert plans.plan(settings("gtca"))[0].alpha(5) == 0.0
  assert plans.eval_alpha(settings("lora_only")) == 0 and plans.eval_alpha(settings("gtca")) == 0.15
  assert settings("gtca", ablation="no_gate").name == "no_gate"
  with pytest.raises(ValueError, match="applies to method gtca"):
    settings("lora_only", ablation="no_gate")
  with pytest.raises(ValueError, match="method 'bert'"):
    settings("bert")
  assert plans.variant("permuted_trees") == ("gtca", "permuted_trees")
  with pytest.raises(cli.CliError, match="unknown method"):
    plans.variant("none")


def test_batch_order_is_a_function_of_seed_stage_and_step():
  steps = [stages.batch_indices(10, 4, s, seed=1, stage=0) for s in range(5)]  # 20 rows: 2 epochs
  flat = np.concatenate(steps)
  assert sorted(flat[:10]) == list(range(10)) and sorted(flat[10:]) == list(range(10))
  assert np.array_equal(stages.batch_indices(10, 4, 3, 1, 0), steps[3])
  assert not np.array_equal(stages.batch_indices(10, 4, 3, 1, 1), steps[3])


def _adapters(out, stage):
  """The newest checkpoint of a stage folder, restored without a target (numpy arrays)."""
  folder = sorted((p for p in (out / stage).iterdir() if p.name.isdigit()),  # not identity.json
                  key=lambda p: int(p.name))[-1]
  return ocp.StandardCheckpointer().restore(folder / "state")["adapters"]


def _leaves(tree, needle):
  return [np.asarray(x) for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]
          if needle in jax.tree_util.keystr(p)]


@pytest.mark.slow  # three Orbax-chained stages, twice (~55 s); the steps are tested one by one above
def test_stages_chain_resume_and_keep_the_backbone(tmp_path, tiny, task, monkeypatch):
  """Two stages of the gtca plan (LoRA, then GTCA only: two compilations keep the test short;
  `test_plans_and_alpha_ramp` checks the real plan's three)."""
  model, tokenizer = tiny
  real = plans.plan
  monkeypatch.setattr(runs, "plan", lambda settings: real(settings)[:2])
  out = tmp_path / "run"
  settings = plans.Settings("tiny", str(out), "gtca", stage_steps=(2, 2, 2), batch_size=4,
                            checkpoint_every=1, log_every=1, blimp_pairs=False)
  lines = []
  result = runs.run(settings, lines.append, backbone=prepare_backbone(model, tokenizer),
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
  again = runs.run(settings, lines.append, backbone=prepare_backbone(model, tokenizer),
                    task=task)
  assert any("stage 1 (lora): resumed at step 2/2" in line for line in lines)
  assert any("stage 2 (gtca): resumed at step 1/2" in line for line in lines)
  assert not any("stage 1 (lora) step" in line for line in lines)
  assert any("stage 2 (gtca) step 2/2" in line for line in lines)
  assert again["metrics"] == result["metrics"]  # the resumed run is the same run
  # a stage of another backbone is refused (its identity record names the prepared backbone)
  other = Decoder(model.config, rngs=nnx.Rngs(5))
  (out / "result.json").unlink()
  with pytest.raises(IdentityError, match="stage1_lora holds a stage trained under other "
                                          "settings \\(prepared_backbone: '"):
    runs.run(settings, lines.append, backbone=prepare_backbone(other, tokenizer), task=task)


def test_toy_rows_are_cut_from_the_left_to_the_backbone_context(tiny, task):
  """A backbone's context bounds the whole row: the prompt is cut from the left so prompt +
  answer letter ≤ context, and the cut rows are counted."""
  model, tokenizer = tiny
  items = task.splits["test"]
  free = toy_encoding.encode_items(items, prepare_backbone(model, tokenizer), "gold", 0)
  limit = min(len(e.ids_T) for e in free) - 3
  tally = collections.Counter()
  cut = toy_encoding.encode_items(items, prepare_backbone(model, tokenizer, context=limit),
                           "gold", 0, tally)
  assert tally["truncated"] == len(items)
  for a, b in zip(free, cut):
    assert len(b.ids_T) == limit and b.ids_T[-1] == a.ids_T[-1]  # the letter is kept
    assert b.ids_T[:-1].tolist() == a.ids_T[:-1][-(limit - 1):].tolist()
    assert b.tree.n_tokens == limit - 1


def test_stage_optimizer_expresses_the_stage_schedule():
  settings = plans.Settings("b", "o", "gtca", lr=3e-3)
  for steps, warmup in ((1, 0), (2, 1), (19, 1), (150, 7), (400, 20)):
    stage = plans.Stage("gtca", "gtca", steps, lambda _: 0.15)
    section = stages.stage_optimizer(settings, stage)
    assert (section.warmup_steps, section.peak_lr, section.min_lr) == (warmup, 3e-3, 3e-3 * 0.1)
    assert (section.b2, section.weight_decay, section.clip, section.trainable) == (
        0.999, 0.0, 1.0, "gtca")
  stage = plans.Stage("joint", "lora,gtca", 150, lambda _: 0.15)
  schedule = make_schedule(stages.stage_optimizer(settings, stage), 150)
  assert 0 < float(schedule(1)) < 3e-3 and float(schedule(7)) == pytest.approx(3e-3)
  assert float(schedule(150)) == pytest.approx(3e-4)  # cosine to lr / 10 at the last update


def _stage_inputs(tiny, task, out, **changes):
  model, tokenizer = tiny
  backbone = prepare_backbone(model, tokenizer)
  settings = plans.Settings(**{**dict(backbone="tiny", out=str(out), method="gtca",
                                       stage_steps=(2, 2, 2), batch_size=4, checkpoint_every=1,
                                       log_every=1, blimp_pairs=False, k=8), **changes})
  graphdef, params = params_of(runs.make_model(backbone, settings))
  train_set = toy_encoding.encode_items(task.splits["train"], backbone, "gold", 0)
  prints = fingerprints(params["backbone"], "lora")
  stage = plans.plan(settings)[0]
  record = stages.stage_record(runs.run_record(settings), 0, stage, stages.digest_line(prints),
                               batches.data_digest(train_set))
  return (0, stage, graphdef, jax.tree.map(jnp.copy, params), train_set, settings,
          batches.row_width(train_set), model.config.n_layers, prints, record)


def test_a_stage_runs_through_the_loop_and_refuses_other_settings(tmp_path, tiny, task):
  """The stage's progress line is the loop's; a stopped stage keeps its checkpoint and its
  identity record; resuming it under another lr is refused naming the key."""
  lines = []
  stopped = stages.run_stage(*_stage_inputs(tiny, task, tmp_path), lines.append, stop_after=1)
  assert stopped is None
  folder = tmp_path / "stage1_lora"
  assert (folder / "1").is_dir() and (folder / stages.RECORD).is_file()
  line = next(x for x in lines if x.startswith("stage 1 (lora) step 1/2"))
  assert "| loss " in line and "| α 0.000 |" in line and "- steps/s" in line and "ETA" in line
  with pytest.raises(IdentityError, match=r"settings.lr: 0.001 in the stage folder, 0.002 now"):
    stages.run_stage(*_stage_inputs(tiny, task, tmp_path, lr=2e-3), lines.append)
  # log_every / checkpoint_every may change: the stage resumes at its step
  lines = []
  params = stages.run_stage(*_stage_inputs(tiny, task, tmp_path, log_every=2), lines.append)
  assert params is not None and "stage 1 (lora): resumed at step 1/2" in lines[0]
  assert any(x.startswith("stage 1 (lora) step 2/2 | loss") for x in lines)


def test_a_non_finite_loss_stops_the_stage_without_saving(tmp_path, tiny, task, monkeypatch):
  """NaN at the first step: exit code 3, no checkpoint written (the loop checks every step)."""
  real = train_state.make_train_step  # every trainer's step is built in train.state

  def poisoned(*args, **kwargs):
    step = real(*args, **kwargs)

    def run(params, opt_state, batch):
      params, opt_state, sums = step(params, opt_state, batch)
      return params, opt_state, {**sums, "loss_sum": sums["loss_sum"] * jnp.nan}

    return run

  monkeypatch.setattr(train_state, "make_train_step", poisoned)
  step_cache.clear()
  try:
    with pytest.raises(NonFiniteLossError, match="non-finite loss .* at step 1") as error:
      stages.run_stage(*_stage_inputs(tiny, task, tmp_path), lambda _: None)
  finally:
    step_cache.clear()
  assert error.value.exit_code == cli.EXIT_NONFINITE == 3
  assert not [p for p in (tmp_path / "stage1_lora").iterdir() if p.name.isdigit()]


def _tiny_params(tiny):
  model, tokenizer = tiny
  backbone = prepare_backbone(model, tokenizer)
  settings = plans.Settings("tiny", "o", "gtca", stage_steps=(2, 2, 2), k=8)
  _, params = params_of(runs.make_model(backbone, settings))
  return settings, params


def _old_layout_state(settings, stage, params):
  """What a stage checkpoint held before GTCA trained through train.steps: optax's chain of
  clip and AdamW over the trained leaves only (None elsewhere)."""
  warmup = min(max(1, stage.steps // 20), stage.steps - 1)
  tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(
      optax.warmup_cosine_decay_schedule(0.0, settings.lr, warmup, stage.steps,
                                         settings.lr * 0.1), weight_decay=0.0))
  mask = trainable_mask(params, stage.trainable)
  trained = jax.tree.map(lambda x, m: x if m else None, params, mask)
  return {"adapters": stages.adapters_of(params), "opt_state": tx.init(trained)}


def test_stage_checkpoints_restore_in_both_layouts(tmp_path, tiny):
  settings, params = _tiny_params(tiny)
  stage = plans.plan(settings)[1]  # stage 2: GTCA only
  digest = stages.digest_line(fingerprints(params["backbone"], "lora"))
  moved = jax.tree.map(lambda x: x + 1, stages.adapters_of(params))
  tx = stages.stage_tx(settings, stage)
  # a finished stage in the old layout: its adapters are reused
  saved = _old_layout_state(settings, stage, params)
  saved["adapters"] = moved
  old = Checkpointer(tmp_path / "old", async_save=False)
  old.save(stage.steps, saved, {"backbone": digest})
  old.wait()
  got, opt_state, step = stages.restore_stage(old, params, tx.init(params), digest, stage.steps)
  assert step == stage.steps and opt_state is None
  assert changed_arrays(stages.with_adapters(params, moved), got) == []
  # a partial stage in the old layout cannot resume: refused, naming the folder
  partial = Checkpointer(tmp_path / "old_partial", async_save=False)
  partial.save(1, _old_layout_state(settings, stage, params), {"backbone": digest})
  partial.wait()
  with pytest.raises(CheckpointError, match="old_partial: step 1 .*another layout"):
    stages.restore_stage(partial, params, tx.init(params), digest, stage.steps)
  # a partial stage in today's layout resumes with its optimizer state; another backbone: refused
  new = Checkpointer(tmp_path / "new", async_save=False)
  state = tx.init(params)
  new.save(1, {"adapters": moved, "opt_state": state}, {"backbone": digest})
  new.wait()
  got, opt_state, step = stages.restore_stage(new, params, tx.init(params), digest, stage.steps)
  assert step == 1 and changed_arrays(stages.with_adapters(params, moved), got) == []
  assert changed_arrays(state, opt_state) == []
  with pytest.raises(CheckpointError, match="another backbone"):
    stages.restore_stage(new, params, tx.init(params), "other", stage.steps)
