"""Offline sentence splitting and PTB word tokenization of raw text.

Sentences: `pysbd` (Pragmatic Segmenter rules for English, shipped inside the package: abbreviations
like "Dr." and "D.C.", numbers, quotes, ellipses), applied line by line so a sentence never spans a
paragraph break. NLTK's Punkt would need a model download (impossible offline), and spaCy's parser
needs a model too.

Words: NLTK's `TreebankWordTokenizer` (regular expressions in the package, no download): PTB
conventions (`don't` → `do n't`, `"` → `` `` `` / `''`, punctuation split off), with spans back into
the text. Each `Sentence` carries both forms benepar wants: `words` (the raw text of each token,
what the parser's encoder reads) with `space_after`, and `escaped` (PTB-escaped: `-LRB-`, `` `` ``,
…: the leaves of the output trees; `tokenizer_bases.ptb_unescape` undoes them for BPE
vocabularies).
"""

from __future__ import annotations

import dataclasses
import functools

from slm_jax import files

_BRACKETS = {"(": "-LRB-", ")": "-RRB-", "[": "-LSB-", "]": "-RSB-", "{": "-LCB-", "}": "-RCB-"}


@dataclasses.dataclass(frozen=True)
class Sentence:
  """One sentence: raw words (with whether whitespace follows) and PTB-escaped leaves."""

  words: tuple[str, ...]
  space_after: tuple[bool, ...]
  escaped: tuple[str, ...]

  def __len__(self) -> int:
    return len(self.words)

  @property
  def key(self) -> str:
    """The cache identity of the sentence: its leaves."""
    return " ".join(self.escaped)


def escape_word(word: str) -> str:
  """A PTB leaf for a raw token: brackets become -LRB- etc.; whitespace cannot occur in a leaf."""
  if word in _BRACKETS:
    return _BRACKETS[word]
  for raw, escaped in _BRACKETS.items():
    if raw in word:
      word = word.replace(raw, escaped)
  return "".join(word.split()) or "_"


_TREEBANK = None  # one NLTK TreebankWordTokenizer, built on first use


def ptb_words(text: str) -> list[str]:
  """PTB leaves of one sentence or fragment (NLTK's Treebank tokenizer, brackets as -LRB- …):
  the word tokenization of every text the evaluators score (BLiMP sentences, SyntaxGym regions),
  as `Splitter.tokenize` gives parsed corpora."""
  global _TREEBANK
  if _TREEBANK is None:
    from nltk.tokenize import TreebankWordTokenizer  # pylint: disable=g-import-not-at-top
    _TREEBANK = TreebankWordTokenizer()
  return [escape_word(word) for word in _TREEBANK.tokenize(text, convert_parentheses=True)]


class Splitter:
  """Text → sentences of PTB tokens (see the module docstring for the choice of tools)."""

  name = "pysbd+treebank"

  def __init__(self, language: str = "en"):
    try:
      import pysbd  # pylint: disable=g-import-not-at-top
      from nltk.tokenize import TreebankWordTokenizer  # pylint: disable=g-import-not-at-top
    except ImportError as error:
      raise ImportError(f"sentence splitting needs pysbd and nltk ({error}): "
                        "pip install pysbd nltk  (no data downloads are needed)") from None
    self.language = language
    self._segmenter = pysbd.Segmenter(language=language, clean=False, char_span=True)
    self._words = TreebankWordTokenizer()

  def __getstate__(self):
    return {"language": self.language}

  def __setstate__(self, state):
    self.__init__(state["language"])

  def split(self, text: str) -> list[Sentence]:
    """The sentences of `text`, in order; paragraphs (lines) are split separately."""
    out: list[Sentence] = []
    for line in files.text_lines(text):  # on \n only: \u2028 & co. stay inside a line
      if not line.strip():
        continue
      for span in self._segmenter.segment(line):
        sentence = self.tokenize(span.sent)
        if sentence.words:
          out.append(sentence)
    return out

  def tokenize(self, sentence: str) -> Sentence:
    """PTB tokens of one sentence."""
    spans = list(self._words.span_tokenize(sentence))
    words = [sentence[start:end] for start, end in spans]
    escaped = self._words.tokenize(sentence, convert_parentheses=True)
    if len(escaped) != len(words):  # rare alignment differences: escape the raw tokens ourselves
      escaped = [_quote(word, k, words) for k, word in enumerate(words)]
    escaped = [escape_word(word) for word in escaped]
    space_after = [end < len(sentence) and sentence[end].isspace() for _, end in spans]
    return Sentence(tuple(words), tuple(space_after), tuple(escaped))


def _quote(word: str, index: int, words: list[str]) -> str:
  if word != '"':
    return word
  opened = sum(1 for w in words[:index] if w == '"') % 2 == 0
  return "``" if opened else "''"


@functools.lru_cache(maxsize=4)
def default_splitter(language: str = "en") -> Splitter:
  return Splitter(language)
