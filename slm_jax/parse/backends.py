"""Parser backends: sentences (PTB tokens) → bracketed trees.

`ParserBackend` is the whole interface: `parse(sentences) -> list[str | ParseFailure]` (one result
per sentence, in order; a result is a bracketed tree as the parser writes it, POS tags and `TOP`
wrapper included: the stage normalizes it per SPEC §1) and `identity` (keys the sentence cache, so
a different model never reuses another model's parses). `calls` counts the sentences sent.

- `BeneparBackend` (the `parse` extra: benepar, torch): a model name (`benepar_en3`, looked up in
  NLTK's data folders) or a local path. A missing model raises `ModelNotFoundError` saying how to
  obtain it; nothing is downloaded at run time.
- `PassThroughBackend`: the documents already hold PTB trees (`reads_trees`); the stage reads them
  (lenient, every malformed tree counted) instead of splitting text.
- `FlatBackend`: `(S w1 w2 …)` per sentence, no model: dry runs of the stage at scale and tests.
"""

from __future__ import annotations

import abc
import dataclasses
import os
from typing import Any, Sequence

from slm_jax.splitting import Sentence

BENEPAR_DEFAULT_MODEL = "benepar_en3"


@dataclasses.dataclass(frozen=True)
class ParseFailure:
  reason: str


class ModelNotFoundError(FileNotFoundError):
  """The parser model is not installed on this machine."""


class ParserBackend(abc.ABC):
  """Sentences → bracketed trees; see the module docstring."""

  name = "backend"
  reads_trees = False  # True: documents hold PTB trees; `parse` is never called

  def __init__(self):
    self.calls = 0  # sentences sent to the parser
    self.batches = 0

  @property
  def identity(self) -> str:
    return self.name

  def parse(self, sentences: Sequence[Sentence]) -> list[str | ParseFailure]:
    self.calls += len(sentences)
    self.batches += 1
    return self._parse(sentences)

  @abc.abstractmethod
  def _parse(self, sentences: Sequence[Sentence]) -> list[str | ParseFailure]:
    ...


class FlatBackend(ParserBackend):
  """One flat `(S …)` per sentence (no model): for dry runs and tests of the stage."""

  name = "flat"

  def _parse(self, sentences: Sequence[Sentence]) -> list[str | ParseFailure]:
    return ["(S " + " ".join(s.escaped) + ")" for s in sentences]


class PassThroughBackend(ParserBackend):
  """Documents whose text already is PTB trees (e.g. a treebank stored as Parquet/JSONL)."""

  name = "passthrough"
  reads_trees = True

  def _parse(self, sentences: Sequence[Sentence]) -> list[str | ParseFailure]:
    raise TypeError("PassThroughBackend reads trees from the documents; it parses no sentences")


def benepar_input_fields(sentence: Sentence) -> dict[str, list]:
  """The `benepar.InputSentence` fields of a sentence: raw `words` (what the encoder reads),
  `space_after` (to rebuild the text) and `escaped_words` (the leaves of the output tree)."""
  return {"words": list(sentence.words), "space_after": list(sentence.space_after),
          "escaped_words": list(sentence.escaped)}


def model_missing_message(model: str) -> str:
  return (f"benepar model {model!r} is not installed here (looked in NLTK's data folders, "
          f"NLTK_DATA={os.environ.get('NLTK_DATA', '<unset>')}). Obtain it on a machine with "
          f"network: python -c \"import benepar; benepar.download('{BENEPAR_DEFAULT_MODEL}')\" "
          f"and copy the folder it writes (~/nltk_data/models/{BENEPAR_DEFAULT_MODEL}) here, "
          f"then set NLTK_DATA to its nltk_data folder; or pass a local path: "
          f"--model=/path/to/{BENEPAR_DEFAULT_MODEL}")


class BeneparBackend(ParserBackend):
  """Berkeley Neural Parser (Kitaev & Klein 2018) on pre-split, pre-tokenized sentences."""

  name = "benepar"

  def __init__(self, model: str = BENEPAR_DEFAULT_MODEL, batch_size: int = 64):
    super().__init__()
    self.model, self.batch_size = model, batch_size
    self._parser: Any = None

  @property
  def identity(self) -> str:
    return f"benepar:{os.path.basename(os.path.normpath(self.model))}"

  @staticmethod
  def _import():
    try:
      import benepar  # pylint: disable=g-import-not-at-top
    except ImportError as error:
      raise ImportError(f"the benepar backend needs the parse extra ({error}): "
                        "pip install -e '.[parse]'  (benepar, torch, nltk)") from None
    return benepar

  def load(self) -> Any:
    """Loads the model once (raises ModelNotFoundError with instructions when it is absent)."""
    if self._parser is None:
      looks_like_path = "/" in self.model or "." in self.model or os.path.sep in self.model
      if looks_like_path and not os.path.exists(self.model):
        raise ModelNotFoundError(f"benepar model path {self.model} does not exist. "
                                 + model_missing_message(BENEPAR_DEFAULT_MODEL))
      benepar = self._import()
      try:
        self._parser = benepar.Parser(self.model, batch_size=self.batch_size)
      except LookupError:
        raise ModelNotFoundError(model_missing_message(self.model)) from None
    return self._parser

  def inputs(self, sentences: Sequence[Sentence]) -> list[Any]:
    benepar = self._import()
    return [benepar.InputSentence(**benepar_input_fields(s)) for s in sentences]

  def _parse(self, sentences: Sequence[Sentence]) -> list[str | ParseFailure]:
    parser = self.load()
    inputs = self.inputs(sentences)
    try:
      return [tree_to_string(t) for t in parser.parse_sents(inputs)]
    except Exception:  # pylint: disable=broad-except  # isolate the sentence that fails
      results: list[str | ParseFailure] = []
      for one in inputs:
        try:
          results.append(tree_to_string(parser.parse(one)))
        except Exception as error:  # pylint: disable=broad-except
          results.append(ParseFailure(f"parser error ({type(error).__name__})"))
      return results


def tree_to_string(tree: Any) -> str:
  """An `nltk.Tree` (benepar's output) as one bracketed line."""
  return tree.pformat(margin=1 << 30)


BACKENDS = {"benepar": BeneparBackend, "passthrough": PassThroughBackend, "flat": FlatBackend}


def make_backend(name: str, *, model: str | None = None, batch_size: int = 64) -> ParserBackend:
  if name == "benepar":
    return BeneparBackend(model or BENEPAR_DEFAULT_MODEL, batch_size=batch_size)
  if name in BACKENDS:
    return BACKENDS[name]()
  raise ValueError(f"unknown parser backend {name!r}; expected one of {', '.join(BACKENDS)}")
