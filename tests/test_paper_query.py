"""The paper format's query (`downstream.paper_query`, SPEC §11), against qlwpc/TG-Interpolation
`olmo/eval/downstream.py` @ cd50d9ef read by hand: no BOS (`encode_TG_string` encodes with
`add_special_tokens=False`), the tree family's closings after the code's two
`convert_grammar_input` passes (`convert_TGnpy_to_tree` merges a closing followed by the same
id; an oracle below redoes the passes token by token), and S_full divided by the continuation's
`cont_str_len` with its structure written out."""

from __future__ import annotations

import json

import numpy as np
import pytest

from slm_jax.configurations import CONFIGURATIONS
from slm_jax.data.encode import encode_document
from slm_jax.downstream import paper_query
from slm_jax.downstream.encoding import TextEncoder, make_tree_source
from slm_jax.downstream.example import TaskExample
from slm_jax.downstream.scoring import evaluate_task
from slm_jax.inference.scorer import Scorer
from slm_jax.kinds import Kind
from slm_jax.ptb import parse_trees
from slm_jax.tokenizer import make_tokenizer
from slm_jax.trees import Tree

# An ARC item whose parses hold runs of closings of one label: "(NP (NP cats) and (NP dogs))"
# ends in NP) NP), the option "mice" is "(NP (NP mice))".
QUESTION = "(SQ (NP Question) : (SQ What do (NP (NP cats) and (NP dogs)) (VP chase)) ?)"
TREES = [QUESTION, "(S (NP The answer) (VP is))", "(NP (NP mice))", "(NP dogs)"]
ITEM = TaskExample("arc_easy", "What do cats and dogs chase?", ("mice", "dogs"), 0, "arc:0")


def parse_tree(text: str) -> Tree:
  return parse_trees(text, normalize=None)[0]


class RecordingScorer(Scorer):
  """Every log-probability −1 (sums count tokens); keeps the sequences it was asked to score."""

  def __init__(self, tokenizer, configuration):  # pylint: disable=super-init-not-called
    self.tokenizer, self.configuration, self.sequences = tokenizer, configuration, []

  def logprobs(self, sequences):
    self.sequences += list(sequences)
    return [np.full(len(s) - 1, -1.0) for s in sequences]


def scored(tmp_path, name: str, mc_format: str = "paper"):
  """(the recorded option sequences as symbols, the item record) of ITEM in format `name`."""
  path = tmp_path / "trees.txt"
  path.write_text("\n\n".join(TREES) + "\n")
  words = {w for t in TREES for w in parse_tree(t).leaves()}
  tokenizer = make_tokenizer("word", words=sorted(words))
  scorer = RecordingScorer(tokenizer, CONFIGURATIONS[name])
  out = tmp_path / f"{name}_{mc_format}"
  evaluate_task(scorer, "arc_easy", [ITEM], None, out, make_tree_source(f"file:{path}"),
                progress=False, mc_format=mc_format)
  record = json.loads((out / "arc_easy.jsonl").read_text())
  return [tokenizer.decode(s.tokens) for s in scorer.sequences], scorer.sequences, record


def test_the_paper_query_has_no_bos(tmp_path):
  """`token_encode` adds no special token and the query is ctx + continuation: the first token
  the model reads is the context's first (the olmes format keeps the BOS)."""
  symbols, sequences, _ = scored(tmp_path, "terminal")
  assert [s[:2] for s in symbols] == [["Question", ":"]] * 2
  assert all(s.kinds[0] == Kind.TERMINAL for s in sequences)
  olmes, sequences, _ = scored(tmp_path, "terminal", "olmes")
  assert all(s.kinds[0] == Kind.BOS for s in sequences)


@pytest.mark.parametrize("name, question_end, mice", [
    # tree: every closing followed by the same id is read as a TG pair, twice: NP) NP) → NP)
    ("tree", ["dogs", "NP)", "(VP"], ["(NP", "(NP", "mice", "NP)"]),
    ("tree_noont", ["dogs", "NP)", "chase"], ["mice", "NP)"]),
    # TripleCNT: halve, triple, halve, triple: a lone closing and a run of 2 become 6 copies
    ("tree_triplecnt", ["dogs"] + ["NP)"] * 6 + ["(VP", "chase"] + ["VP)"] * 6,
     ["(NP", "(NP", "mice"] + ["NP)"] * 6),
    ("tree_compress", ["dogs", ")", "(VP"], ["(NP", "(NP", "mice", ")"]),  # unchanged
])
def test_tree_family_closings_as_the_codes_double_conversion_leaves_them(tmp_path, name,
                                                                         question_end, mice):
  symbols, _, _ = scored(tmp_path, name)
  first = symbols[0]
  at = first.index("dogs")
  assert first[at:at + len(question_end)] == question_end
  assert first[-len(mice):] == mice


def test_s_full_divides_by_the_continuation_with_its_structure_written_out(tmp_path):
  """`cont_str_len` of the tree format's " mice" continuation: "<(NP><(NP> mice<NP)>" minus one
  = 4 + 5 + 5 + 5; of "(NP dogs)": "<(NP> dogs<NP)>" minus one = 4 + 10. S_term keeps the
  words' 4; the terminal format has no structure to add."""
  _, _, record = scored(tmp_path, "tree")
  assert [o["chars"] for o in record["options"]] == [4, 4]
  assert [o["chars_full"] for o in record["options"]] == [19, 14]
  _, _, record = scored(tmp_path, "tree_triplecnt")
  assert [o["chars_full"] for o in record["options"]] == [4 + 10 + 6 * 5, 4 + 5 + 6 * 5]
  _, _, record = scored(tmp_path, "terminal")
  assert [o["chars_full"] for o in record["options"]] == [4, 4]
  _, _, record = scored(tmp_path, "tree", "olmes")
  assert [o["chars_full"] for o in record["options"]] == [4, 4]


# --- the closing rule against a token-by-token transcription of the code's passes ---------------

def code_pass(ids: list[int], closing: set[int], variant: str) -> list[int]:
  """One `convert_grammar_input` of the code on a tree-format id list: a closing followed by the
  same id is written once (`convert_TGnpy_to_tree`), then the variant's own step."""
  out, i = [], 0
  while i < len(ids):
    out.append(ids[i])
    i += 2 if ids[i] in closing and i + 1 < len(ids) and ids[i + 1] == ids[i] else 1
  if variant == "tree_noont":
    out = [t for t in out if t in closing or t < opening_floor(closing)]
  if variant == "tree_triplecnt":
    out = [t for t in out for _ in range(3 if t in closing else 1)]
  return out


def opening_floor(closing: set[int]) -> int:
  return min(closing) - 26  # the ONT family sits just below the CNT family (tokenizer layout)


def random_tree(rng, depth: int = 0) -> Tree:
  children = []
  for _ in range(rng.integers(1, 3)):
    children.append(random_tree(rng, depth + 1) if depth < 4 and rng.random() < 0.6
                    else str(rng.choice(["a", "b"])))
  return Tree(str(rng.choice(["NP", "VP"])), tuple(children))


@pytest.mark.parametrize("name", ["tree", "tree_noont", "tree_triplecnt"])
def test_code_closings_equal_two_passes_of_the_codes_conversion(name):
  tokenizer = make_tokenizer("word", words=["a", "b"])
  closing = set(tokenizer.cnt_range)
  scheme = CONFIGURATIONS[name].scheme.scored_as
  rng = np.random.default_rng(0)
  for _ in range(200):
    trees = [random_tree(rng) for _ in range(rng.integers(1, 3))]
    lin1 = encode_document(trees, tokenizer, "lin1").tokens[1:-1].tolist()
    want = code_pass(code_pass(lin1, closing, name), closing, name)
    ours = encode_document(trees, tokenizer, scheme)
    ours = ours.take(np.arange(1, len(ours) - 1))
    got, _ = paper_query.code_closings(ours, np.zeros(len(ours), np.int32), scheme)
    assert got.tokens.tolist() == want, [tokenizer.decode(want), tokenizer.decode(got.tokens)]
    assert set(got.kinds[np.isin(got.tokens, list(closing))]) <= {Kind.CNT, Kind.CNT2}


def test_closing_counts_and_runs_stop_at_a_component():
  assert paper_query.code_closing_count(np.arange(1, 7), "lin1").tolist() == [1, 1, 1, 1, 2, 2]
  assert paper_query.code_closing_count(np.arange(1, 5), "lin3").tolist() == [6, 6, 9, 9]
  assert paper_query.code_closing_count(np.arange(1, 4), "lin1_merge").tolist() == [1, 2, 3]
  tokenizer = make_tokenizer("word", words=["a"])
  sequence = encode_document([Tree("NP", (Tree("NP", ("a",)),))], tokenizer, "lin1")
  sequence = sequence.take(np.arange(1, len(sequence) - 1))  # (NP (NP a NP) NP)
  split = np.asarray([0, 0, 0, 0, 1], np.int32)  # the two closings in two strings of the code
  kept, component = paper_query.code_closings(sequence, split, "lin1")
  assert len(kept) == 5 and component.tolist() == [0, 0, 0, 0, 1]
  merged, _ = paper_query.code_closings(sequence, np.zeros(5, np.int32), "lin1")
  assert tokenizer.decode(merged.tokens) == ["(NP", "(NP", "a", "NP)"]


def test_a_terminal_encoder_needs_a_tree_source_for_units_cut_on_brackets():
  from slm_jax.downstream import paper_format  # pylint: disable=g-import-not-at-top
  row = TaskExample("openbookqa", "The sun is responsible for", ("a", "b"), 0, "o:0")
  prompt = paper_format.build_prompts(row)[0]
  encoder = TextEncoder(make_tokenizer("word", words=["a"]), CONFIGURATIONS["terminal"],
                        paper=True)
  with pytest.raises(ValueError, match="openbookqa units are cut on their parses in every "
                                       "format: give the terminal encoder a tree source"):
    encoder.encode(prompt.components, joint=prompt.joint)
