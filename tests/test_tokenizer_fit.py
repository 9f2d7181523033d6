"""A tokenizer must fit the checkpoint it is used with (`hf.tokenizer_fit`, issue #47 item 3):
training from a GGUF file with another model's tokenizer.json was exit 0 with the vocabulary
silently grown; now vocabulary size, the ids of every token, special-token ids and the
embedding's rows are compared, and a disagreement stops the run naming both numbers."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from slm_jax import configs  # noqa: E402
from slm_jax.hf.gguf_export import export_gguf  # noqa: E402
from slm_jax.hf.tokenizer_fit import TokenizerMismatchError, tokenizer_problems  # noqa: E402
from slm_jax.train import trainer  # noqa: E402
from slm_jax.train.run_config import load_config  # noqa: E402
from tests.gguf_fixtures import byte_level_vocab, write_model  # noqa: E402
from tests.test_hf_import import make_hf_model, tiny_tokenizer  # noqa: E402


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
  """(a tiny GGUF model of 384 tokens, its exported folder, another model's tokenizer.json)."""
  root = tmp_path_factory.mktemp("fit")
  vocab = byte_level_vocab()
  model = make_hf_model("qwen2", vocab_size=len(vocab["tokens"]), tie_word_embeddings=True)
  gguf = root / "model.gguf"
  write_model(gguf, "qwen2", model, {}, tokenizer=vocab)
  exported = export_gguf(gguf, root / "exported")
  other = root / "other"
  tiny_tokenizer().save_pretrained(other)
  return gguf, exported, other / "tokenizer.json"


def test_the_checkpoints_own_tokenizer_fits(checkpoint):
  gguf, exported, _ = checkpoint
  assert tokenizer_problems(gguf, exported / "tokenizer.json") == []
  assert tokenizer_problems(exported) == []


def test_another_models_tokenizer_is_named_with_both_numbers(checkpoint, tmp_path):
  gguf, exported, other = checkpoint
  rows = json.loads((exported / "config.json").read_text())["vocab_size"]
  problems = tokenizer_problems(gguf, other)
  size = max(json.loads(other.read_text())["model"]["vocab"].values()) + 1
  assert f"{other} has {size:,} token ids, the checkpoint's own vocabulary {rows:,}" in problems
  assert any(p.endswith(f"in {gguf})") and "ids name other tokens" in p for p in problems)
  bigger = tmp_path / "tokenizer.json"  # more ids than the embedding has rows
  tok = tokenizers.Tokenizer.from_file(str(exported / "tokenizer.json"))
  tok.add_tokens(["<extra1>", "<extra2>", "<extra3>"])
  tok.save(str(bigger))
  assert any(f"{bigger} has {rows + 3:,} token ids but the checkpoint's embedding has "
             f"{rows:,} rows" in p for p in tokenizer_problems(gguf, bigger))


def test_training_from_a_checkpoint_with_another_tokenizer_stops_first(checkpoint, tmp_path):
  gguf, _, other = checkpoint
  cfg = load_config("hf", [f"model.init_from={gguf}", f"data.tokenizer_path={other}",
                           "mesh.fsdp=1", "train.steps=1", "train.global_batch=2",
                           "optimizer.grad_accum_steps=1", "data.seq_len=32",
                           "model.param_dtype=float32", "model.compute_dtype=float32",
                           "train.eval_every=0", "data.embedded_train_documents=8",
                           "data.embedded_eval_documents=2", "model.lora_rank=2"],
                    folder=configs.FOLDER)
  with pytest.raises(TokenizerMismatchError, match=r"tokenizer and model disagree: .* has "
                     r"[0-9,]+ token ids, the checkpoint's own vocabulary [0-9,]+"):
    trainer.train(cfg, tmp_path / "run")
  assert not (tmp_path / "run" / "checkpoints").exists() or not any(
      (tmp_path / "run" / "checkpoints").iterdir())
