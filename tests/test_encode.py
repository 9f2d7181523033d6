"""Trees → ids: the id sequence decodes to the symbol sequence `explain` shows."""

from __future__ import annotations

import pytest

from slm_jax.data.encode import encode_document
from slm_jax.linearize import SCHEMES, linearize
from slm_jax.tokenizer import make_tokenizer
from slm_jax.trees import Tree

DOC = [Tree("S", ("Cats", Tree("VP", ("chase", "mice")))),
       Tree("S", (Tree("NP", ("the", "dogs")), Tree("VP", ("bark",))))]


@pytest.mark.parametrize("scheme", SCHEMES)
def test_ids_decode_to_the_symbols(scheme):
  tokenizer = make_tokenizer("word", words=[w for t in DOC for w in t.leaves()])
  encoded = encode_document(DOC, tokenizer, scheme, seed=4)
  symbols = linearize(DOC, scheme, seed=4)
  assert tokenizer.decode(encoded.tokens, encoded.kinds) == symbols.symbols()
  assert encoded.kinds.tolist() == symbols.kinds.tolist()
  assert encoded.sentence.tolist() == symbols.sentence.tolist()


def test_bpe_pieces_stay_terminals_and_pauses_follow_every_piece():
  tokenizer = make_tokenizer("gpt2")
  doc = [Tree("S", ("Supercalifragilistic", Tree("VP", ("sings",))))]
  lin1 = encode_document(doc, tokenizer, "lin1")
  pieces = len(tokenizer.encode_word("Supercalifragilistic")) + len(tokenizer.encode_word("sings"))
  assert int((lin1.kinds == 3).sum()) == pieces > 2
  pause = encode_document(doc, tokenizer, "pause1")
  assert int((pause.tokens == tokenizer.pause_id).sum()) == pieces
