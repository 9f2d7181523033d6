"""Word and character vocabularies of the chart parser and the featurization of word lists.

A sentence of n words becomes a row of T = N + 2 tokens (N = the padded length): `<s>`, the words,
`</s>`, padding. Each token has a word id (frequent training words; else UNK) and C character ids
(`<w>`, the word's characters — the first and last `(C − 2) / 2` when longer —, `</w>`, padding);
characters never seen in training are UNK, so any word of any script is parsed.

Legend: B sentences, T = N + 2 tokens, C characters per word.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Iterable, Sequence

import numpy as np

PAD, UNK, BOS, EOS = 0, 1, 2, 3  # ids shared by both vocabularies (word: <s>, </s>)
BOW, EOW = 2, 3  # character ids of the word boundaries
_SPECIAL_WORDS = ("<pad>", "<unk>", "<s>", "</s>")
_SPECIAL_CHARS = ("<pad>", "<unk>", "<w>", "</w>")
_SENTENCE_CHARS = {BOS: 4, EOS: 5}  # <s> / </s> are spelled with one reserved character each


@dataclasses.dataclass(frozen=True)
class Vocab:
  """Words (id ≥ 4) and characters (id ≥ 6) of the training data, with word counts."""

  words: tuple[str, ...]
  chars: tuple[str, ...]
  word_counts: tuple[int, ...] = ()

  def __post_init__(self):
    object.__setattr__(self, "_word_index", {w: k for k, w in enumerate(self.words)})
    object.__setattr__(self, "_char_index", {c: k for k, c in enumerate(self.chars)})

  @classmethod
  def from_sentences(cls, sentences: Iterable[Sequence[str]], min_count: int = 2) -> Vocab:
    word_counts: collections.Counter = collections.Counter()
    char_counts: collections.Counter = collections.Counter()
    for words in sentences:
      word_counts.update(words)
      for word in words:
        char_counts.update(word)
    kept = sorted((w for w, c in word_counts.items() if c >= min_count),
                  key=lambda w: (-word_counts[w], w))
    chars = sorted(char_counts, key=lambda c: (-char_counts[c], c))
    return cls(words=(*_SPECIAL_WORDS, *kept), chars=(*_SPECIAL_CHARS, "<s>", "</s>", *chars),
               word_counts=(0,) * 4 + tuple(word_counts[w] for w in kept))

  def to_json(self) -> dict:
    return {"words": list(self.words), "chars": list(self.chars),
            "word_counts": list(self.word_counts)}

  @classmethod
  def from_json(cls, data: dict) -> Vocab:
    words, chars = tuple(data["words"]), tuple(data["chars"])
    if words[:4] != _SPECIAL_WORDS or chars[:4] != _SPECIAL_CHARS:
      raise ValueError("not a parser vocabulary (its special entries differ)")
    return cls(words, chars, tuple(data.get("word_counts", ())))

  def word_id(self, word: str) -> int:
    return self._word_index.get(word, UNK)

  def char_ids(self, word: str, width: int) -> list[int]:
    inner = width - 2
    if len(word) > inner:
      half = inner // 2
      word = word[:half] + word[len(word) - (inner - half):]
    index = self._char_index
    return [BOW, *(index.get(c, UNK) for c in word), EOW]

  def encode(self, sentences: Sequence[Sequence[str]], padded_words: int,
             word_chars: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(word_ids_BT, char_ids_BTC, lengths_B) with T = padded_words + 2, C = word_chars + 2."""
    B, T, C = len(sentences), padded_words + 2, word_chars + 2
    word_ids_BT = np.zeros((B, T), np.int32)
    char_ids_BTC = np.zeros((B, T, C), np.int32)
    lengths_B = np.zeros(B, np.int32)
    for b, words in enumerate(sentences):
      n = len(words)
      if n > padded_words:
        raise ValueError(f"sentence {b} has {n} words, more than the padded length {padded_words}")
      lengths_B[b] = n
      word_ids_BT[b, 0], word_ids_BT[b, n + 1] = BOS, EOS
      char_ids_BTC[b, 0, 0], char_ids_BTC[b, n + 1, 0] = _SENTENCE_CHARS[BOS], _SENTENCE_CHARS[EOS]
      for t, word in enumerate(words, 1):
        word_ids_BT[b, t] = self.word_id(word)
        ids = self.char_ids(word, C)
        char_ids_BTC[b, t, :len(ids)] = ids
    return word_ids_BT, char_ids_BTC, lengths_B

  def keep_probabilities(self, alpha: float) -> np.ndarray:
    """Per word id, the chance a training occurrence keeps its id (else UNK): c / (c + α)."""
    counts = np.asarray(self.word_counts or (0,) * len(self.words), np.float32)
    keep = counts / (counts + alpha) if alpha > 0 else np.ones_like(counts)
    keep[:4] = 1.0
    return keep.astype(np.float32)


def padded_length(n: int, buckets: Sequence[int]) -> int:
  """The smallest bucket ≥ n (beyond the last bucket: n rounded up to a multiple of 64)."""
  for bucket in buckets:
    if n <= bucket:
      return int(bucket)
  return int(-(-n // 64) * 64)
