"""GTCA on a Hugging Face backbone: a tiny random Llama saved with transformers' own classes, a
word-level tokenizer.json over the toy task's words, then `python -m slm_jax.gtca.train
--backbone=FOLDER` end to end (three stages, the frozen check, the restored run)."""

from __future__ import annotations

import json
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from slm_jax.gtca import backbone as gtca_backbone  # noqa: E402
from slm_jax.gtca import runs, train  # noqa: E402
from slm_jax.gtca.toy_task import make_toy_task  # noqa: E402
from slm_jax.hf.load import load_model  # noqa: E402

ITEMS = dict(train=8, dev=2, test=4)
SPECIALS = ["<unk>", "<s>", "</s>"]


def _words(task) -> list[str]:
  words = {w for items in task.splits.values() for item in items
           for w in (*item.question.split(), *" ".join(item.options).split())}
  return sorted(words | set(gtca_backbone.prompt_words(2)))


def write_checkpoint(folder, words, *, by_character: bool = False):
  """A random 2-layer Llama (GQA) and its word-level tokenizer in `folder`; `by_character`: one
  token per character instead (so " A" is two tokens)."""
  vocab = {w: i for i, w in enumerate(SPECIALS)}
  units = sorted({c for w in words for c in w} | {" "}) if by_character else words
  for unit in units:
    vocab.setdefault(unit, len(vocab))
  tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
  tok.pre_tokenizer = (tokenizers.pre_tokenizers.Split(tokenizers.Regex("."), "isolated")
                       if by_character else tokenizers.pre_tokenizers.WhitespaceSplit())
  fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>",
                                              eos_token="</s>", unk_token="<unk>")
  config = transformers.LlamaConfig(
      vocab_size=len(vocab) + 2, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
      num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=128,
      bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False)
  torch.manual_seed(0)
  model = transformers.LlamaForCausalLM(config)
  model.save_pretrained(folder, safe_serialization=True)
  fast.save_pretrained(folder)
  return folder


@pytest.fixture(scope="module")
def task():
  return make_toy_task(**ITEMS, seed=0)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, task):
  return write_checkpoint(tmp_path_factory.mktemp("llama"), _words(task))


def test_hf_backbone_imports_the_checkpoint_with_adapters(checkpoint):
  assert gtca_backbone.is_hf_checkpoint(checkpoint)
  got = gtca_backbone.load_backbone(checkpoint, seed=1, lora_rank=4)
  assert got.added_words == () and got.decoder.config.lora_rank == 4
  assert got.text_tokenizer.bos_id == 1
  assert got.context == 128 == gtca_backbone.backbone_context(checkpoint)  # max_position_embeddings
  ids, _ = got.text_tokenizer.encode(" A")
  assert got.letter_ids[0] == int(ids[0]) and len(set(got.letter_ids)) == 2
  plain = load_model(checkpoint, compute_dtype="float32")
  ids = np.array([[1, 5, 6, 7, 8]], np.int32)
  from slm_jax.hf.scoring import logits  # pylint: disable=import-outside-toplevel
  # LoRA's B starts at zero: the adapted backbone computes the checkpoint's own function
  np.testing.assert_allclose(logits(got.decoder, ids), logits(plain, ids), atol=1e-5)


@pytest.mark.slow  # three stages compiled: ~170 s on the 2 shared cores
def test_gtca_train_cli_on_a_hf_backbone(checkpoint, tmp_path):
  out = tmp_path / "run"
  code = train.main([f"--backbone={checkpoint}", f"--out={out}", "--methods=gtca",
                     "--stage_steps=3,3,3", "--batch_size=4", "--log_every=3",
                     *(f"--{k}_items={v}" for k, v in ITEMS.items())])
  assert code == 0
  result = json.loads((out / "result.json").read_text())
  assert [s["stage"] for s in result["stages"]] == ["lora", "gtca", "joint"]
  assert len(result["backbone_checks"]) == 3
  assert all("bitwise equal to the loaded ones" in line for line in result["backbone_checks"]), result["backbone_checks"]
  assert 0.0 <= result["metrics"]["toy"] <= 100.0
  restored = runs.restore_run(out, log=lambda _: None)
  assert restored.settings.backbone == str(checkpoint) and restored.backbone.added_words == ()


def test_a_letter_of_several_tokens_is_refused(tmp_path, task):
  folder = write_checkpoint(tmp_path / "chars", _words(task), by_character=True)
  with pytest.raises(ValueError, match="option letter 'A' is 2 tokens"):
    gtca_backbone.load_backbone(folder)


def test_option_letters_of_one_id_are_refused():
  """Letters that all map to one id (e.g. `<unk>` of a tokenizer without them) are refused."""
  unk = types.SimpleNamespace(encode=lambda text: (np.array([0]), None))
  with pytest.raises(ValueError, match=r"letters A, B are not distinct ids \(\[0, 0\]\)"):
    gtca_backbone.letter_ids(unk, 2, "b")
  by_letter = types.SimpleNamespace(encode=lambda text: (np.array([ord(text[-1])]), None))
  assert gtca_backbone.letter_ids(by_letter, 2, "b") == (65, 66)
