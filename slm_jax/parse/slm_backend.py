"""The parse stage's `--backend=slm`: our own chart parser (`slm_jax.parser`), offline.

The parse stage sits above the parsers it runs (this module reads `slm_jax.parser`; the parser
never imports the parse stage).

`SlmBackend(model=None)` parses the stage's sentences (their PTB-escaped words, the leaves of the
output trees) with `load_parser(model)` (None: the shipped GUM model), in length-bucketed batches.
Its `identity` includes a digest of the model's weights, so the stage's sentence cache never
reuses another model's parses. A sentence longer than the parser's word limit is a counted
`ParseFailure`, never silently dropped; the stage's `--max_words` usually stops it earlier.
"""

from __future__ import annotations

import pathlib
from typing import Sequence

from slm_jax import identity, ptb
from slm_jax.parse.backends import ModelNotFoundError, ParseFailure, ParserBackend
from slm_jax.splitting import Sentence


class SlmBackend(ParserBackend):
  """`slm_jax.parser` as a parse-stage backend (see the module docstring)."""

  name = "slm"

  def __init__(self, model: str | None = None):
    super().__init__()
    self.model = model
    self._parser = None
    self._identity: str | None = None

  def load(self):
    """Loads the model once; a missing or corrupt model folder raises `ModelNotFoundError`."""
    if self._parser is None:
      from slm_jax.parser.api import SHIPPED, load_parser  # pylint: disable=g-import-not-at-top
      from slm_jax.parser.weights import ParserFileError  # pylint: disable=g-import-not-at-top
      folder = pathlib.Path(self.model) if self.model else SHIPPED
      try:
        self._parser = load_parser(folder)
      except ParserFileError as error:
        raise ModelNotFoundError(f"--backend=slm: {error}") from None
      weights = sorted(p for p in folder.glob("*") if p.suffix in (".json", ".safetensors"))
      self._identity = f"slm:{folder.name}:{identity.content_digest(*weights)[:16]}"
    return self._parser

  @property
  def identity(self) -> str:
    self.load()
    return self._identity

  def _parse(self, sentences: Sequence[Sentence]) -> list[str | ParseFailure]:
    parser = self.load()
    limit = parser.max_words
    ok = [i for i, s in enumerate(sentences) if 0 < len(s.escaped) <= limit]
    trees = parser.parse([list(sentences[i].escaped) for i in ok]) if ok else []
    results: list[str | ParseFailure] = [
        ParseFailure(f"longer than the slm parser's limit ({limit} words)") for _ in sentences]
    for i, tree in zip(ok, trees):
      results[i] = ptb.format_tree(tree)
    return results
