"""`--config=hf --config.model.init_from=DIR|FILE.gguf` (SPEC §13): every architecture key from
the checkpoint (a tiny Llama written by transformers), the tokenizer from its folder; a flag that
contradicts the checkpoint is refused naming both values; `hf` without a checkpoint is refused."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from slm_jax import configs  # noqa: E402
from slm_jax.config_files import ConfigError  # noqa: E402
from slm_jax.hf.load import check_matches, config_values  # noqa: E402
from slm_jax.train.run_config import load_config  # noqa: E402
from tests.test_hf_import import LLAMA3, make_hf_model, tiny_tokenizer  # noqa: E402


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
  out = tmp_path_factory.mktemp("llama")
  make_hf_model("llama", rope_parameters=LLAMA3, tie_word_embeddings=True,
                rms_norm_eps=1e-6).save_pretrained(out)
  tiny_tokenizer().save_pretrained(out)
  return out


def test_every_dimension_comes_from_the_checkpoint(folder):
  cfg = load_config("hf", [f"--config.model.init_from={folder}", "mesh.fsdp=1"],
                    folder=configs.FOLDER)
  assert (cfg.model.d_model, cfg.model.n_heads, cfg.model.n_kv_heads, cfg.model.head_dim,
          cfg.model.n_layers) == (64, 4, 2, 16, 2)
  assert cfg.model.rope_scaling == "llama3" and cfg.model.tie_embeddings
  assert cfg.model.norm_eps == 1e-6 and cfg.model.mlp_ratio == 2 * 96 / 64
  assert cfg.data.tokenizer == "hf" and cfg.data.tokenizer_path == str(folder / "tokenizer.json")
  assert cfg.optimizer.trainable == "lora" and cfg.model.lora_rank == 16
  check_matches(cfg.model, folder)  # what training checks before loading: no difference
  assert set(config_values(folder)) >= {"d_model", "rope_theta", "mlp_ratio", "norm_eps"}


def test_a_contradicting_flag_is_refused_naming_both_values(folder):
  with pytest.raises(ConfigError) as error:
    load_config("hf", [f"model.init_from={folder}", "model.d_model=128",
                       "model.tie_embeddings=false", "model.n_heads=4"], folder=configs.FOLDER)
  text = str(error.value)
  assert "model.d_model=128 contradicts the checkpoint" in text and "d_model=64" in text
  assert "tie_embeddings=true" in text and "n_heads" not in text  # agreeing flags pass


def test_hf_needs_a_checkpoint_and_a_gguf_needs_a_tokenizer_json(tmp_path):
  with pytest.raises(ConfigError, match="give --config.model.init_from"):
    load_config("hf", ["mesh.fsdp=1"], folder=configs.FOLDER)
  with pytest.raises(ConfigError, match="no_such: "):
    load_config("hf", [f"model.init_from={tmp_path}/no_such"], folder=configs.FOLDER)


@pytest.mark.slow
def test_lora_run_from_the_hf_preset_exports_and_scores_the_same(folder, tmp_path):
  """#34 item 5 on a tiny checkpoint: `--config=hf` + LoRA, a few steps, `slm_jax.export`, loaded
  by transformers: the same log-probs as the run (the LoRA-merged weights)."""
  import json  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  from slm_jax import export, score  # pylint: disable=import-outside-toplevel
  from slm_jax.train import trainer  # pylint: disable=import-outside-toplevel
  cfg = load_config("hf", [f"model.init_from={folder}", "mesh.fsdp=1", "train.steps=3",
                           "train.global_batch=2", "optimizer.grad_accum_steps=1",
                           "data.seq_len=32", "model.param_dtype=float32",
                           "model.compute_dtype=float32", "optimizer.warmup_steps=1",
                           "optimizer.peak_lr=0.05", "train.checkpoint_every=3",
                           "train.eval_every=0", "data.embedded_train_documents=20",
                           "data.embedded_eval_documents=2", "model.lora_rank=2"],
                    folder=configs.FOLDER)
  run, out = tmp_path / "run", tmp_path / "export"
  trainer.train(cfg, run)
  assert export.main([f"--workdir={run}", f"--out={out}"]) == 0
  ids = tmp_path / "ids.txt"
  ids.write_text("1 5 9 14 20 33 41\n2 7 7 60 3\n")
  mine = tmp_path / "mine.jsonl"
  assert score.main([f"--checkpoint={run}", f"--ids_file={ids}", f"--out={mine}"]) == 0
  model = transformers.AutoModelForCausalLM.from_pretrained(
      out, dtype=torch.float32, attn_implementation="eager").eval()
  pretrained = transformers.AutoModelForCausalLM.from_pretrained(
      folder, dtype=torch.float32, attn_implementation="eager").eval()
  moved = 0.0
  for record in map(json.loads, mine.read_text().splitlines()):
    tokens = torch.tensor([record["ids"]])
    for which in (model, pretrained):
      with torch.no_grad():
        logp = torch.log_softmax(which(tokens).logits[0].double(), -1)
      theirs = logp[torch.arange(tokens.shape[1] - 1), tokens[0, 1:]].numpy()
      delta = np.abs(np.asarray(record["logprobs"][1:]) - theirs).max()
      if which is model:
        assert delta < 1e-4
      else:
        moved = max(moved, delta)
  assert moved > 1e-3  # the LoRA steps changed the model: the export carries them
