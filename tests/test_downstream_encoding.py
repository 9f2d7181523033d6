"""Text components → token sequences: equal to `encode_document` of the sentences' trees for every
format, component indices, tree sources (flat, a proposals file, the shipped parser)."""

from __future__ import annotations

import numpy as np
import pytest

from slm_jax.configurations import CONFIGURATIONS
from slm_jax.data.encode import encode_document
from slm_jax.downstream.encoding import TextEncoder, make_tree_source, split_words
from slm_jax.downstream.example import TaskExample
from slm_jax.downstream.scoring import render_item
from slm_jax.kinds import Kind
from slm_jax.tokenizer import make_tokenizer
from slm_jax.trees import Tree

TOKENIZER = make_tokenizer("word", words="Question : What do cats chase ? Answer mice".split())
PROMPT = ("Question: What do cats chase?\nAnswer:", " mice")
SENTENCES = [("Question", ":", "What", "do", "cats", "chase", "?"), ("Answer", ":"), ("mice",)]


@pytest.mark.parametrize("name", ["terminal", "tree", "tgtree", "tg", "tree_noont",
                                  "tree_compress", "tree_triplecnt", "tree_shuffle", "pause1",
                                  "pause2"])
def test_encoding_equals_encode_document_of_the_sentences(name):
  configuration = CONFIGURATIONS[name]
  encoder = TextEncoder(TOKENIZER, configuration, make_tree_source("flat"))
  label = "S" if configuration.scheme.scored_with_structure else "X"
  trees = [Tree(label, words) for words in SENTENCES]
  expected = encode_document(trees, TOKENIZER, configuration.scheme.scored_as)
  for eos in (True, False):
    encoded = encoder.encode(PROMPT, eos=eos)
    keep = np.arange(len(expected) - (0 if eos else 1))
    for field in ("tokens", "kinds", "sentence", "unit"):
      np.testing.assert_array_equal(getattr(encoded.sequence, field),
                                    getattr(expected, field)[keep], err_msg=field)
    sequence, component = encoded.sequence, encoded.component_T
    assert component.dtype == np.int32 and component.shape == (len(sequence),)
    assert component[0] == -1 and sequence.kinds[0] == Kind.BOS
    assert (sequence.kinds[-1] == Kind.EOS) == eos and (component[-1] == -1) == eos
    inner = component[1:len(component) - eos]
    assert (np.diff(inner) >= 0).all() and set(inner.tolist()) == {0, 1}
    # the continuation is the last sentence: exactly its tokens carry component 1
    np.testing.assert_array_equal(component == 1, (sequence.sentence == 2)
                                  & (sequence.kinds != Kind.EOS))


def test_tree_prompt_shows_brackets_and_component_of_the_continuation(tmp_path):
  proposals = tmp_path / "trees.txt"
  proposals.write_text("(SBARQ (NP Question) : (SBARQ (WHNP What) (SQ do (NP cats) (VP chase))"
                       " ?))\n\n(NP mice)\n")
  source = make_tree_source(f"file:{proposals}")
  encoder = TextEncoder(TOKENIZER, CONFIGURATIONS["tree"], source)
  encoded = encoder.encode(PROMPT)
  assert encoder.render(encoded, names=["question", "continuation"]) == (
      "<s>\n[question] (SBARQ (NP Question NP) : (SBARQ (WHNP What WHNP) (SQ do (NP cats NP) "
      "(VP chase VP) SQ) ? SBARQ) SBARQ) (S Answer : S)\n[continuation] (NP mice NP)")
  assert source.stats == {"sentences": 2, "fallback": 1}  # "Answer :" is not in the file
  continuation = encoded.component_T == 1
  assert encoded.sequence.kinds[continuation].tolist() == [Kind.ONT, Kind.TERMINAL, Kind.CNT]
  tgtree = TextEncoder(TOKENIZER, CONFIGURATIONS["tgtree"], source).encode(PROMPT)
  assert tgtree.sequence.kinds[tgtree.component_T == 1].tolist() == [
      Kind.ONT, Kind.TERMINAL, Kind.CNT1, Kind.CNT2]
  # the item renderer labels shots, question and continuation
  demo = TaskExample("arc_easy", "What do cats chase?", ("mice", "dogs"), 0, "d:1")
  text = render_item(TextEncoder(TOKENIZER, CONFIGURATIONS["tree"], make_tree_source("flat")),
                     demo, [demo])
  assert text.splitlines() == [
      "<s>", "[demo1] (S Question : What do cats chase ? S) (S Answer : S)",
      "[demo1 answer] (S mice S)", "[question] (S Question : What do cats chase ? S) "
      "(S Answer : S)", "[continuation] (S mice S)"]


def test_terminal_formats_need_no_trees_and_tree_formats_do():
  encoder = TextEncoder(TOKENIZER, CONFIGURATIONS["terminal"], None)
  assert encoder.render(encoder.encode(PROMPT)) == (
      "<s>\n[0] Question : What do cats chase ? Answer :\n[1] mice")
  with pytest.raises(ValueError, match="tree source"):
    TextEncoder(TOKENIZER, CONFIGURATIONS["tree"], None)
  shuffle = TextEncoder(TOKENIZER, CONFIGURATIONS["tree_shuffle"], make_tree_source("flat"))
  assert shuffle.scheme == "lin0" and not shuffle.with_trees  # SPEC §9: scored as lin0


def test_empty_components_and_bad_specs_are_errors():
  encoder = TextEncoder(TOKENIZER, CONFIGURATIONS["tree"], make_tree_source("flat"))
  with pytest.raises(ValueError, match="component 1 has no words"):
    encoder.encode(["cats", "  \n "])
  with pytest.raises(TypeError):
    encoder.encode("cats")
  for spec in ("flat:x", "file:", "benepar"):
    with pytest.raises(ValueError, match="unknown tree source"):
      make_tree_source(spec)
  assert split_words("Dr. Smith came (late).\nHe sat.") == (
      ("Dr.", "Smith", "came", "-LRB-", "late", "-RRB-", "."), ("He", "sat", "."))


@pytest.mark.slow
def test_the_shipped_parser_parses_every_component_in_one_batch():
  source = make_tree_source("parser")
  encoder = TextEncoder(TOKENIZER, CONFIGURATIONS["tree"], source)
  encoder.prefetch(PROMPT)
  assert source.stats["parsed"] == 3
  encoded = encoder.encode(PROMPT)
  assert source.stats["parsed"] == 3 and source.stats["sentences"] == 3  # served from the cache
  kinds = encoded.sequence.kinds
  assert (kinds == Kind.TERMINAL).sum() == 10 and (kinds == Kind.ONT).sum() >= 3
  assert (encoded.component_T == 1).sum() >= 3  # "mice" with its brackets
  too_long = " ".join(["cats"] * (source.parser.max_words + 1))
  assert source.trees(too_long) == [Tree("S", tuple(too_long.split()))]
  assert source.stats["fallback"] == 1
