"""A checkpoint's tokenizer: tokenizer.json through `tokenizers`, the chat template rendered as
transformers renders it (from chat_template.jinja, a tokenizer_config.json string or a list of
named templates), and our reserved structural tokens appended in one contiguous range after a
pretrained vocabulary (and written back into an exported tokenizer.json)."""

from __future__ import annotations

import json

import jinja2
import pytest

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from slm_jax.hf.tokenizer import CheckpointTokenizer, tokenizer_json  # noqa: E402
from slm_jax.tokenizer import NUM_RESERVED, make_tokenizer  # noqa: E402
from tests.test_hf_import import CHAT_TEMPLATE, ROOT_TEXT, tiny_tokenizer  # noqa: E402

CONVERSATIONS = [
    [{"role": "user", "content": "  hello there  "}],
    [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi {{x}}",
                                                   "meta": {"lang": "en", "n": [1, 2]}},
     {"role": "assistant", "content": "hello"}],
    [{"role": "user", "content": str(i)} for i in range(9)],  # the loop breaks after 6
]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
  folder = tmp_path_factory.mktemp("tok")
  fast = tiny_tokenizer()
  fast.save_pretrained(folder)
  return folder, fast


@pytest.mark.parametrize("generation", [False, True])
def test_chat_template_matches_transformers(saved, generation):
  folder, fast = saved
  assert (folder / "chat_template.jinja").is_file()
  ours = CheckpointTokenizer(folder)
  for messages in CONVERSATIONS:
    want = fast.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation)
    assert ours.chat(messages, add_generation_prompt=generation) == want


def test_template_errors_and_other_homes(saved, tmp_path):
  folder, fast = saved
  with pytest.raises(jinja2.TemplateError, match="unknown role tool"):
    CheckpointTokenizer(folder).chat([{"role": "tool", "content": "x"}])
  for layout in ("string", "named"):
    target = tmp_path / layout
    target.mkdir()
    (target / "tokenizer.json").write_bytes((folder / "tokenizer.json").read_bytes())
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = (CHAT_TEMPLATE if layout == "string" else
                               [{"name": "tool_use", "template": "x"},
                                {"name": "default", "template": CHAT_TEMPLATE}])
    (target / "tokenizer_config.json").write_text(json.dumps(config))
    messages = CONVERSATIONS[1]
    assert CheckpointTokenizer(target).chat(messages) == fast.apply_chat_template(
        messages, tokenize=False)


def test_encode_matches_the_tokenizer_json(saved):
  folder, fast = saved
  ours = CheckpointTokenizer(folder)
  for line in ROOT_TEXT:
    ids = fast(line, add_special_tokens=False).input_ids
    assert ours.encode(line) == ids
    assert ours.encode(line, bos=True) == [fast.bos_token_id, *ids]
    assert ours.pieces(ids) == fast.convert_ids_to_tokens(ids)
  assert (ours.bos_id, ours.eos_id) == (fast.bos_token_id, fast.eos_token_id)


def test_reserved_tokens_follow_the_pretrained_vocabulary(saved):
  folder, _ = saved
  tok = make_tokenizer("hf", path=folder / "tokenizer.json")
  size = CheckpointTokenizer(folder).size
  assert tok.base_size == size and tok.vocab_size == size + NUM_RESERVED
  assert tok.pad_id == size and tok.cnt_range.stop == tok.vocab_size  # one contiguous range
  text, names = tokenizer_json(tok)
  hf = tokenizers.Tokenizer.from_str(text)
  assert sorted(names) == list(range(tok.pad_id, tok.vocab_size))
  # the pretrained vocabulary already has <s> and </s>: ours are written under other names
  assert (names[tok.bos_id], names[tok.eos_id]) == ("<|slm:<s>|>", "<|slm:</s>|>")
  assert names[tok.ont_id("S")] == "(S"
  for token_id in (tok.pad_id, tok.bos_id, tok.merged_close_id, tok.ont_id("S"),
                   tok.cnt_id("X")):
    assert hf.token_to_id(names[token_id]) == token_id
  line = ROOT_TEXT[1]
  with_reserved = hf.encode(f"{names[tok.ont_id('NP')]} {line}", add_special_tokens=False).ids
  assert with_reserved[0] == tok.ont_id("NP")
  assert hf.encode(line, add_special_tokens=False).ids == CheckpointTokenizer(folder).encode(line)


def test_word_base_exports_and_qwen_tiktoken_is_refused():
  tok = make_tokenizer("word", words="a b c".split())
  exported = tokenizers.Tokenizer.from_str(tokenizer_json(tok)[0])
  assert exported.encode("b a", add_special_tokens=False).ids == [
      tok.encode_word("b")[0], tok.encode_word("a")[0]]
  with pytest.raises(ValueError, match="'qwen' tokenizer base has no tokenizer.json export"):
    tokenizer_json(make_tokenizer("qwen"))


def test_jinja2_is_a_base_dependency():
  """Chat templates render without the heavy `hf` extra (issue #36 item 4)."""
  import pathlib  # pylint: disable=import-outside-toplevel
  import re  # pylint: disable=import-outside-toplevel
  import tomllib  # pylint: disable=import-outside-toplevel
  root = pathlib.Path(__file__).resolve().parents[1]
  project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
  names = [re.split(r"[<>=!~ ]", d)[0].lower() for d in project["dependencies"]]
  assert "jinja2" in names
  assert re.search(r"^jinja2==", (root / "requirements.txt").read_text(), re.M)
