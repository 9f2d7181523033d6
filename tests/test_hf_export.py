"""Export round trip (SPEC §13): a tiny SLM trained on the embedded corpus (with LoRA adapters,
merged on export) → `python -m slm_jax.export` → transformers loads the Llama folder and gives
our logits within 1e-4; its tokenizer.json holds the reserved structural tokens at their ids;
the scoring CLI gives the same log-probs for the workdir and the exported folder; TG-family runs
are refused with the reason."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from slm_jax import cli, export, score  # noqa: E402
from slm_jax.hf.scoring import logits  # noqa: E402
from slm_jax.train import trainer  # noqa: E402
from slm_jax.train.loading import load_run  # noqa: E402
from tests.test_train import small_config  # noqa: E402

TOL = 1e-4


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("run")
  cfg = small_config("terminal", steps=3, **{"model.lora_rank": 2, "model.n_kv_heads": 2})
  trainer.train(cfg, workdir)
  out = tmp_path_factory.mktemp("hf") / "model"
  assert export.main([f"--workdir={workdir}", f"--out={out}"]) == 0
  return workdir, out


def test_transformers_gives_our_logits(exported):
  workdir, out = exported
  run = load_run(workdir)
  assert run.model.blocks[0].attn.q.lora_a.shape[-1] == 2  # the run has adapters to merge
  hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32,
                                                         attn_implementation="eager").eval()
  assert type(hf).__name__ == "LlamaForCausalLM"
  ids = np.random.default_rng(0).integers(0, run.tokenizer.vocab_size, (2, 100))
  with torch.no_grad():
    theirs = hf(torch.tensor(ids)).logits.numpy()
  assert np.abs(logits(run.model, ids) - theirs).max() < TOL


def test_tokenizer_json_holds_the_reserved_tokens(exported):
  workdir, out = exported
  tok = load_run(workdir).tokenizer
  hf = transformers.AutoTokenizer.from_pretrained(out)
  words = tok.base.words[1:8]
  ours = [i for w in words for i in tok.encode_word(w)]
  assert hf(" ".join(words), add_special_tokens=False).input_ids == ours
  for token_id in (tok.pad_id, tok.bos_id, tok.eos_id, tok.pause_id, tok.ont_id("NP"),
                   tok.cnt_id("VP"), tok.vocab_size - 1):
    assert hf.convert_tokens_to_ids(tok.decode([token_id])[0]) == token_id  # no collisions
  assert len(hf) == tok.vocab_size
  assert hf.bos_token == "<s>" and hf.bos_token_id == tok.bos_id
  config = json.loads((out / "config.json").read_text())
  assert config["vocab_size"] == tok.vocab_size and config["architectures"] == ["LlamaForCausalLM"]


def test_score_cli_agrees_on_workdir_and_export(exported, tmp_path):
  workdir, out = exported
  tok = load_run(workdir).tokenizer
  words = tok.base.words[1:12]
  text = tmp_path / "text.txt"
  text.write_text(" ".join(words[:6]) + "\n\n" + " ".join(words[6:]) + "\n")
  results = []
  for checkpoint in (workdir, out):
    target = tmp_path / f"{checkpoint.name}.jsonl"
    assert score.main([f"--checkpoint={checkpoint}", f"--text_file={text}", "--bos",
                       f"--out={target}", "--topk=2"]) == 0
    results.append([json.loads(line) for line in target.read_text().splitlines()])
  for ours, theirs in zip(*results):
    assert ours["ids"] == theirs["ids"]
    if ours["ids"]:
      assert ours["ids"][0] == tok.bos_id and ours["logprobs"][0] is None
      np.testing.assert_allclose(ours["logprobs"][1:], theirs["logprobs"][1:], atol=TOL)
  assert results[0][1] == {"ids": [], "tokens": [], "logprobs": [], "topk": [], "unknown": 0}


def test_tg_runs_are_refused(tmp_path, capsys):
  trainer.train(small_config("tg", steps=1), tmp_path / "tg")
  code = cli.run(export.main, [f"--workdir={tmp_path / 'tg'}", f"--out={tmp_path / 'out'}"])
  assert code == cli.EXIT_USAGE
  message = capsys.readouterr().err
  assert "attention 'tg'" in message and "structural kind" in message
  assert not (tmp_path / "out").exists()


def test_the_export_states_the_context_the_model_was_trained_on(exported):
  """Issue #47 item 9: config.json said max_position_embeddings 8192 for every export."""
  workdir, out = exported
  config = json.loads((out / "config.json").read_text())
  assert config["max_position_embeddings"] == load_run(workdir).cfg.data.seq_len != 8192
  assert json.loads((out / "tokenizer_config.json").read_text())["model_max_length"] == (
      config["max_position_embeddings"])


def test_force_replaces_the_whole_folder_of_another_model(exported, tmp_path):
  """Issue #47 item 2: `--force` over another model's sharded folder left its shards and index
  (which transformers and `score` then read) beside the new model.safetensors."""
  workdir, fresh = exported
  out = tmp_path / "out"
  out.mkdir()
  index = {"metadata": {}, "weight_map": {"model.embed_tokens.weight": "model-00001-of-00002"
                                                                       ".safetensors"}}
  (out / "model.safetensors.index.json").write_text(json.dumps(index))
  for name in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
               "README.md"):
    (out / name).write_text("another model")
  code = cli.run(export.main, [f"--workdir={workdir}", f"--out={out}"])
  assert code == cli.EXIT_USAGE and (out / "README.md").exists()  # refused without --force
  assert export.main([f"--workdir={workdir}", f"--out={out}", "--force"]) == 0
  assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in fresh.iterdir())
  assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary folder left


def test_the_old_module_path_names_the_export_command():
  """Issue #47 item 9: `python -m slm_jax.hf.export` exited 0 and wrote nothing."""
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  done = subprocess.run([sys.executable, "-m", "slm_jax.hf.export", "--out=x"],
                        capture_output=True, text=True, timeout=120)
  assert done.returncode == 2 and len(done.stderr.splitlines()) == 1
  assert "python -m slm_jax.export --workdir=RUN --out=DIR" in done.stderr
