"""Token ids for linearized trees: a base vocabulary for words plus reserved structure tokens.

SPEC §2 (linearizations, kinds) and §6 (vocabulary). Id layout, each family contiguous, appended
after the base of size B:
  [0, B)          base pieces (terminal words; a word may be several pieces)
  B .. B+4        PAD, BOS, EOS, PAUSE, MERGED_CLOSE (the unlabeled `)` of lin1_merge)
  [B+5, B+31)     one ONT per label, `(ADJP` … `(X` in `kinds.PTB_LABELS` order
  [B+31, B+57)    one CNT per label, `ADJP)` … `X)`; CNT1/CNT2 copies share their label's CNT id
so MERGED_CLOSE, ONT and CNT (the structural ids) form the single range [B+4, B+57).

Sizes: word-level W + 57; GPT-2 50,257 + 57 = 50,314 (the paper's 50,320 reserved a different
set: BOS, PAD, 3 special, 6 bracket tokens, 26 + 26); Qwen2 151,644 (151,643 ranks +
<|endoftext|>) + 57 = 151,701; HF tokenizer.json N + 57. Only the `Kind` tells CNT, CNT1 and
CNT2 apart, never the id (SPEC §3).

BPE bases encode each word as `" " + word`, GPT-2's convention for a word inside running text,
after undoing PTB escapes (`-LRB-` → `(`, `` `` `` and `''` → `"`); the word-level base keeps the
PTB word as is. `encode_text` reads raw running text whole instead (a BPE base's own
pre-tokenizer), as the paper code tokenizes a plain string (HellaSwag's Ctx_b mask).
"""

from __future__ import annotations

import itertools
import json
import os
import pathlib
from typing import Any, Iterable, Sequence

import numpy as np

from slm_jax import files
from slm_jax import kinds as kinds_lib
from slm_jax.kinds import Kind, PTB_LABELS
from slm_jax.tokenizer_bases import (HashMismatchError, HfBase, TiktokenBase, WordVocab,
                                     base_from_spec, ptb_unescape)

__all__ = ["Tokenizer", "make_tokenizer", "WordVocab", "TiktokenBase", "HfBase",
           "HashMismatchError", "ptb_unescape", "SPEC_FILE_NAME", "NUM_RESERVED"]

SPEC_FILE_NAME = "tokenizer_spec.json"
SPEC_FORMAT = "slm_jax.tokenizer"
SPEC_VERSION = 1
# The "special" family, in id order; MERGED_CLOSE comes last so it adjoins the ONT range.
SPECIAL_FAMILY = (
    ("pad", Kind.PAD, kinds_lib.PAD_SYMBOL),
    ("bos", Kind.BOS, kinds_lib.BOS_SYMBOL),
    ("eos", Kind.EOS, kinds_lib.EOS_SYMBOL),
    ("pause", Kind.PAUSE, kinds_lib.PAUSE_SYMBOL),
    ("merged_close", Kind.CNT, kinds_lib.MERGED_CLOSE_SYMBOL),
)
NUM_RESERVED = len(SPECIAL_FAMILY) + 2 * len(PTB_LABELS)  # 57


WORD_CACHE_LIMIT = 1 << 20  # distinct words kept by `encode_word` before the cache restarts


class Tokenizer:
  """A base vocabulary plus the reserved special/ONT/CNT families; linearized symbols <-> ids."""

  def __init__(self, base: WordVocab | TiktokenBase | HfBase):
    self.base = base
    self.base_size = base.size
    start = self.base_size
    self.pad_id, self.bos_id, self.eos_id, self.pause_id, self.merged_close_id = (
        range(start, start + len(SPECIAL_FAMILY)))
    self.special_range = range(start, start + len(SPECIAL_FAMILY))
    self.ont_range = range(self.special_range.stop, self.special_range.stop + len(PTB_LABELS))
    self.cnt_range = range(self.ont_range.stop, self.ont_range.stop + len(PTB_LABELS))
    self.vocab_size = self.cnt_range.stop
    self._label_offset = {label: i for i, label in enumerate(PTB_LABELS)}
    self._word_cache: dict[str, tuple[int, ...]] = {}
    self.word_cache_limit = WORD_CACHE_LIMIT
    # (kind, symbol) -> (id,) for every non-terminal token; what encode_symbols looks up.
    self._reserved_ids: dict[tuple[int, str], tuple[int, ...]] = {}
    reserved_symbols, reserved_kinds = [], []
    for (_, kind, symbol), token_id in zip(SPECIAL_FAMILY, self.special_range):
      self._reserved_ids[(int(kind), symbol)] = (token_id,)
      reserved_symbols.append(symbol)
      reserved_kinds.append(int(kind))
    for label, token_id in zip(PTB_LABELS, self.ont_range):
      self._reserved_ids[(int(Kind.ONT), kinds_lib.ont_symbol(label))] = (token_id,)
      reserved_symbols.append(kinds_lib.ont_symbol(label))
      reserved_kinds.append(int(Kind.ONT))
    for label, token_id in zip(PTB_LABELS, self.cnt_range):
      for kind in (Kind.CNT, Kind.CNT1, Kind.CNT2):
        self._reserved_ids[(int(kind), kinds_lib.cnt_symbol(label))] = (token_id,)
      reserved_symbols.append(kinds_lib.cnt_symbol(label))
      reserved_kinds.append(int(Kind.CNT))
    self._reserved_symbols = tuple(reserved_symbols)
    # Kind each reserved id is written with (CNT ids also take CNT1/CNT2); decode checks it.
    self._reserved_kinds = np.asarray(reserved_kinds, dtype=np.int8)

  # ---- ids of the reserved families

  def ont_id(self, label: str) -> int:
    return self.ont_range.start + self._label_index(label)

  def cnt_id(self, label: str) -> int:
    return self.cnt_range.start + self._label_index(label)

  def _label_index(self, label: str) -> int:
    try:
      return self._label_offset[label]
    except KeyError:
      raise ValueError(f"unknown label {label!r} (expected one of the 26 PTB labels)") from None

  def is_structural(self, ids: Any) -> np.ndarray:
    """Whether each id is a structure token: MERGED_CLOSE, an ONT or a CNT (vectorized)."""
    ids = np.asarray(ids)
    return (ids >= self.merged_close_id) & (ids < self.vocab_size)

  def layout(self) -> dict[str, Any]:
    """The reserved id layout (what `save` records and `load` checks)."""
    return {
        "base_size": self.base_size,
        "special": {name: token_id
                    for (name, _, _), token_id in zip(SPECIAL_FAMILY, self.special_range)},
        "labels": list(PTB_LABELS),
        "ont_start": self.ont_range.start,
        "cnt_start": self.cnt_range.start,
        "vocab_size": self.vocab_size,
    }

  # ---- encoding

  def encode_word(self, word: str) -> tuple[int, ...]:
    """Base piece ids of one terminal word (cached: this is on the data hot path)."""
    pieces = self._word_cache.get(word)
    if pieces is None:
      if not word:
        raise ValueError("cannot encode an empty terminal word")
      pieces = self.base.encode_word(word)
      if len(self._word_cache) >= self.word_cache_limit:  # bounded memory at corpus scale:
        self._word_cache.clear()  # frequent words come straight back
      self._word_cache[word] = pieces
    return pieces

  def encode_text(self, text: str) -> tuple[int, ...]:
    """Base piece ids of raw running text read whole, as a plain string goes through the base's
    own tokenizer (the paper code's `tokenizer.encode(" " + text)`); unlike `encode_word` per
    PTB word, a BPE base splits it by its own pre-tokenizer (GPT-2: " Then, he's" → " Then",
    ",", " he", "'s"). No prefix is added and no PTB escape undone."""
    return tuple(self.base.encode_text(text))

  def encode_symbols(
      self, symbols: Sequence[str], kinds: Sequence[int] | np.ndarray,
  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Linearized symbols + parallel kinds -> (ids int32, kinds int8, word_index int32).

    TERMINAL symbols are words, expanded into their base pieces (each piece keeps kind TERMINAL);
    `word_index[t]` is the input position output t came from. Every other symbol must be the one
    its kind is written with (`(S` ONT; `S)` CNT/CNT1/CNT2; `)` merged CNT; `<s>`, `</s>`,
    `<pad>`, `<P>`).
    """
    kinds_in = np.asarray(kinds, dtype=np.int8)
    if kinds_in.ndim != 1 or kinds_in.shape[0] != len(symbols):
      raise ValueError(f"symbols ({len(symbols)}) and kinds {kinds_in.shape} must be parallel "
                       "1-D sequences")
    terminal = int(Kind.TERMINAL)
    word_cache, reserved_ids = self._word_cache, self._reserved_ids
    pieces = []
    for position, (symbol, kind) in enumerate(zip(symbols, kinds_in.tolist())):
      if kind == terminal:
        token_ids = word_cache.get(symbol) or self.encode_word(symbol)
      else:
        token_ids = reserved_ids.get((kind, symbol))
        if token_ids is None:
          raise self._unknown_symbol_error(symbol, kind, position)
      pieces.append(token_ids)
    lengths = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces))
    ids = np.fromiter(itertools.chain.from_iterable(pieces), dtype=np.int32,
                      count=int(lengths.sum()))
    word_index = np.repeat(np.arange(len(pieces), dtype=np.int32), lengths)
    return ids, np.repeat(kinds_in, lengths), word_index

  def _unknown_symbol_error(self, symbol: str, kind: int, position: int) -> ValueError:
    if kind not in Kind._value2member_map_:
      return ValueError(f"invalid kind value {kind} for symbol {symbol!r} at position {position}")
    kind_name = _kind_name(kind)
    if kind in kinds_lib.STRUCTURAL_KINDS:
      return ValueError(f"unknown label symbol {symbol!r} (kind {kind_name}) at position "
                        f"{position}; labels must be one of the 26 PTB labels")
    return ValueError(f"symbol {symbol!r} at position {position} does not match its kind "
                      f"{kind_name}")

  # ---- decoding

  def decode(self, ids: Any, kinds: Any = None, word_index: Any = None) -> list[str]:
    """Symbols of `ids`: one string per id, or, given `word_index`, one per input position.

    Base pieces decode to their text (BPE pieces keep their leading space); with `word_index` the
    pieces of each word are joined and the word prefix dropped, so for words without PTB escapes
    `decode(*encode_symbols(symbols, kinds)) == symbols`. `kinds`, when given, is checked
    against the ids.
    """
    ids = np.asarray(ids, dtype=np.int64)
    if ids.ndim != 1:
      raise ValueError(f"decode expects a 1-D id sequence, got shape {ids.shape}")
    if ids.size and (ids.min() < 0 or ids.max() >= self.vocab_size):
      bad = ids[(ids < 0) | (ids >= self.vocab_size)][0]
      raise ValueError(f"id {bad} outside the vocabulary [0, {self.vocab_size})")
    if kinds is not None:
      self._check_kinds(ids, np.asarray(kinds, dtype=np.int8))
    if word_index is None:
      return [self._decode_one(i) for i in ids.tolist()]
    word_index = np.asarray(word_index)
    if word_index.shape != ids.shape:
      raise ValueError(f"word_index {word_index.shape} must be parallel to ids {ids.shape}")
    starts = np.flatnonzero(np.diff(word_index, prepend=-1) != 0) if ids.size else np.zeros(0, int)
    out = []
    for start, stop in zip(starts.tolist(), itertools.chain(starts[1:].tolist(), [ids.size])):
      if ids[start] < self.base_size:
        out.append(self.base.decode_word(ids[start:stop].tolist()))
      else:
        out.extend(self._decode_one(i) for i in ids[start:stop].tolist())
    return out

  def _decode_one(self, token_id: int) -> str:
    if token_id < self.base_size:
      return self.base.decode_piece(token_id)
    return self._reserved_symbols[token_id - self.base_size]

  def _check_kinds(self, ids: np.ndarray, kinds: np.ndarray) -> None:
    if kinds.shape != ids.shape:
      raise ValueError(f"kinds {kinds.shape} must be parallel to ids {ids.shape}")
    in_base = ids < self.base_size
    expected = np.where(in_base, np.int8(Kind.TERMINAL),
                        self._reserved_kinds[np.where(in_base, 0, ids - self.base_size)])
    cnt_copy = np.isin(ids, self.cnt_range) & np.isin(kinds, (Kind.CNT1, Kind.CNT2))
    ok = (kinds == expected) | cnt_copy
    if not ok.all():
      position = int(np.flatnonzero(~ok)[0])
      raise ValueError(f"id {ids[position]} at position {position} cannot have kind "
                       f"{_kind_name(int(kinds[position]))}")

  # ---- persistence

  def save(self, dir_or_path: str | os.PathLike) -> pathlib.Path:
    """Writes `tokenizer_spec.json` (base type, parameters, hashes, reserved layout); its path.

    A directory (or a path without `.json`) gets `tokenizer_spec.json` inside it; an HF base's
    tokenizer.json is copied next to the spec.
    """
    path = _spec_path(dir_or_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    spec = {"format": SPEC_FORMAT, "version": SPEC_VERSION, "base": self.base.to_spec(path.parent),
            "layout": self.layout()}
    return files.write_text(path, json.dumps(spec, indent=1) + "\n")  # atomic, names the file

  @classmethod
  def load(cls, dir_or_path: str | os.PathLike) -> Tokenizer:
    """Rebuilds a saved tokenizer, verifying base file hashes and the reserved layout."""
    path = _spec_path(dir_or_path)
    if not path.is_file():
      raise FileNotFoundError(f"tokenizer spec not found: {path}")
    try:
      spec = json.loads(path.read_text(encoding="utf-8"))
      base_spec, layout = spec["base"], spec["layout"]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as error:
      raise ValueError(f"corrupt tokenizer spec {path}: {error!r}") from error
    if spec.get("format") != SPEC_FORMAT or spec.get("version") != SPEC_VERSION:
      raise ValueError(f"{path} is not a {SPEC_FORMAT} v{SPEC_VERSION} spec "
                       f"(format {spec.get('format')!r}, version {spec.get('version')!r})")
    try:
      base = base_from_spec(base_spec, path.parent)
    except KeyError as error:
      raise ValueError(f"corrupt tokenizer spec {path}: base is missing {error}") from error
    tokenizer = cls(base)
    if tokenizer.layout() != layout:
      raise ValueError(f"tokenizer spec {path}: recorded layout {layout} differs from the rebuilt "
                       f"{tokenizer.layout()}")
    return tokenizer


def _kind_name(kind: int) -> str:
  return Kind(kind).name if kind in Kind._value2member_map_ else f"<invalid kind {kind}>"


def _spec_path(dir_or_path: str | os.PathLike) -> pathlib.Path:
  path = pathlib.Path(dir_or_path)
  return path if path.suffix == ".json" else path / SPEC_FILE_NAME


TOKENIZERS = ("word", "gpt2", "qwen", "hf")  # the base kinds `make_tokenizer` builds


def make_tokenizer(kind: str, *, words: Iterable[str] | None = None, min_count: int = 1,
                   max_size: int | None = None, path: str | os.PathLike | None = None,
                   word_prefix: str = " ", unescape_ptb: bool = True) -> Tokenizer:
  """A tokenizer over base `kind`: "word" (from corpus `words`), "gpt2", "qwen", "hf" (`path`)."""
  if kind == "word":
    if words is None:
      raise ValueError("make_tokenizer('word') needs the corpus words")
    return Tokenizer(WordVocab.build(words, min_count=min_count, max_size=max_size))
  if kind in ("gpt2", "qwen"):
    return Tokenizer(TiktokenBase(kind))
  if kind == "hf":
    if path is None:
      raise ValueError("make_tokenizer('hf') needs the path of a tokenizer.json")
    return Tokenizer(HfBase(path, word_prefix=word_prefix, unescape_ptb=unescape_ptb))
  raise ValueError(f"unknown tokenizer kind {kind!r} (expected one of {', '.join(TOKENIZERS)})")
