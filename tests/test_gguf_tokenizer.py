"""A GGUF file's tokenizer (`slm_jax.hf.gguf_tokenizer` behind `CheckpointTokenizer(FILE.gguf)`)
against transformers' GGUF tokenizer (`AutoTokenizer.from_pretrained(folder, gguf_file=...)`):
the same ids (BOS as the file says), the same decoded text, special tokens and chat template, for
byte-level vocabularies under each pre-tokenizer and SentencePiece ones with and without merges;
where llama.cpp and transformers differ (SmolLM's digit split, `add_space_prefix`), llama.cpp's
rule; unknown tokenizers refused by name."""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")

from slm_jax.hf.config import HfConfigError  # noqa: E402
from slm_jax.hf.tokenizer import CheckpointTokenizer  # noqa: E402
from tests.gguf_fixtures import (TEXTS, byte_level_vocab, sentencepiece_vocab,  # noqa: E402
                                 write_tokenizer_only)
from tests.test_hf_import import CHAT_TEMPLATE  # noqa: E402
from tests.test_hf_tokenizer import CONVERSATIONS  # noqa: E402

VOCABS = {
    "byte_level_qwen2": lambda: byte_level_vocab("qwen2", CHAT_TEMPLATE),
    "byte_level_llama_bpe": lambda: byte_level_vocab("llama-bpe"),
    "byte_level_default": lambda: byte_level_vocab("default"),
    "byte_level_smollm": lambda: byte_level_vocab("smollm", split_digits=True),
    "sentencepiece": lambda: sentencepiece_vocab(True, CHAT_TEMPLATE),
    "sentencepiece_scores_only": lambda: sentencepiece_vocab(False),
}


def both(tmp_path, meta):
  path = write_tokenizer_only(tmp_path / "tok.gguf", meta)
  theirs = transformers.AutoTokenizer.from_pretrained(tmp_path, gguf_file=path.name)
  return CheckpointTokenizer(path), theirs


@pytest.mark.parametrize("name", VOCABS)
def test_same_ids_and_text_as_transformers(tmp_path, name):
  ours, theirs = both(tmp_path, VOCABS[name]())
  assert ours.size == len(theirs)
  assert (ours.bos_id, ours.eos_id) == (theirs.bos_token_id, theirs.eos_token_id)
  assert ours.special == {"bos_token": theirs.bos_token, "eos_token": theirs.eos_token,
                          "unk_token": theirs.unk_token, "pad_token": theirs.pad_token}
  for text in [*TEXTS, ""]:
    ids = theirs(text).input_ids
    assert ours.encode(text, bos=ours.add_bos) == ids, text
    assert ours.tokenizer.encode(text).ids == ids, text  # the post-processor adds the same
    assert ours.decode(ids) == theirs.decode(ids)
  assert ours.add_bos == name.startswith("sentencepiece")


@pytest.mark.parametrize("generation", [False, True])
def test_chat_template_as_transformers_renders_it(tmp_path, generation):
  ours, theirs = both(tmp_path, byte_level_vocab("qwen2", CHAT_TEMPLATE))
  for messages in CONVERSATIONS:
    assert ours.chat(messages, add_generation_prompt=generation) == theirs.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=generation)


def test_smollm_splits_every_digit_as_llama_cpp_does(tmp_path):
  """llama.cpp's `smollm` pre-tokenizer isolates each digit (\\p{N}) before GPT-2's regex;
  transformers' GGUF loader does not, which shows on a vocabulary with digit merges (SmolLM's
  own has none: there both agree, test above)."""
  ours, theirs = both(tmp_path, byte_level_vocab("smollm"))
  text = "Numbers: 1234567, 2024 and 42!"
  pieces = ours.pieces(ours.encode(text))
  assert all(sum(c.isdigit() for c in piece) <= 1 for piece in pieces), pieces
  assert any(sum(c.isdigit() for c in piece) > 1
             for piece in theirs.convert_ids_to_tokens(theirs(text).input_ids))


def test_add_space_prefix_false_is_honoured(tmp_path):
  ours = CheckpointTokenizer(write_tokenizer_only(
      tmp_path / "tok.gguf", {**sentencepiece_vocab(), "add_space_prefix": False}))
  assert not ours.pieces(ours.encode("the cat"))[0].startswith("▁")
  with_prefix = CheckpointTokenizer(write_tokenizer_only(tmp_path / "tok2.gguf",
                                                         sentencepiece_vocab()))
  assert with_prefix.pieces(with_prefix.encode("the cat"))[0].startswith("▁")


@pytest.mark.parametrize("change,message", [
    ({"model": "bert"}, "tokenizer.ggml.model='bert' is not supported"),
    ({"pre": "jais"}, "tokenizer.ggml.pre='jais' is not supported"),
])
def test_unknown_tokenizers_are_refused(tmp_path, change, message):
  path = write_tokenizer_only(tmp_path / "tok.gguf", {**byte_level_vocab(), **change})
  with pytest.raises(HfConfigError, match=r"tok\.gguf: " + message.replace(".", r"\.")):
    CheckpointTokenizer(path)
