"""GTCA prompts, word → token alignment, the span tree and the height ↔ layer chunk layout."""

from __future__ import annotations

import collections
import json

import numpy as np
import pytest

from slm_jax.gtca import prompts, spans
from slm_jax.gtca.spans import SpanNode, SpanTree
from slm_jax.ptb import parse_trees

tokenizers = pytest.importorskip("tokenizers")

QUESTION = "Which unbelievable animals chase mice?"
QUESTION_TREE = "(SBARQ (WHNP Which unbelievable animals) (SQ (VP chase mice)) ?)"
CORPUS = ["Question: Which animals chase mice?", "Options:", "A. cats", "B. dogs", "Answer:",
          "The cats chase the mice.", "Context: Cats hunt."] * 3


def tiny_tokenizer(vocab_size: int = 300) -> "tokenizers.Tokenizer":
  """A byte-level BPE trained on a few lines: `unbelievable` is unseen, so it splits into many
  sub-word tokens."""
  from tokenizers import decoders, models, pre_tokenizers, trainers
  tok = tokenizers.Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  tok.train_from_iterator(CORPUS, trainers.BpeTrainer(
      vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
      show_progress=False))
  return tok


@pytest.fixture(scope="module")
def tok():
  return prompts.TextTokenizer(tiny_tokenizer(), bos_id=0, name="tiny")


def token_texts(prompt):
  return [prompt.text[a:b] for a, b in prompt.offsets_T2]


def words_of(tree: SpanTree) -> dict[str, tuple[int, int]]:
  return {n.label: (n.start, n.end) for n in tree.nodes() if not n.children}


# ---- prompts -------------------------------------------------------------------------------

def test_mcqa_prompt_fields_and_update_mask(tok):
  p = prompts.mcqa_prompt(QUESTION, ["cats", "dogs"], tok, context="Cats hunt.", example_id="q1")
  assert p.text == (f"Context: Cats hunt.\nQuestion: {QUESTION}\nOptions:\nA. cats\nB. dogs\n"
                    "Answer:")
  assert [p.field_text(f) for f in p.parse_fields] == ["Cats hunt.", QUESTION]
  assert p.field_text(p.options_header) == "Options:"
  assert [p.field_text(f) for f in p.option_lines] == ["A. cats", "B. dogs"]
  assert p.field_text(p.answer) == "Answer:"
  assert {name: p.field_text(span) for name, span in p.fields().items()} == {
      "context": "Cats hunt.", "question": QUESTION, "options_header": "Options:",
      "option_A": "A. cats", "option_B": "B. dogs", "answer": "Answer:"}
  texts = token_texts(p)
  block = (p.options_header[0], p.option_lines[-1][1])
  for t, (a, b) in enumerate(p.offsets_T2):
    inside = a < block[1] and b > block[0]
    assert p.update_mask_T[t] == (0.0 if inside else 1.0), (t, texts[t])
  zero = "".join(t for t, m in zip(texts, p.update_mask_T) if m == 0)
  assert zero == "Options:\nA. cats\nB. dogs"
  # The question, its label and the answer field are updated.
  one = "".join(t for t, m in zip(texts, p.update_mask_T) if m == 1)
  assert QUESTION in one and one.endswith("\nAnswer:")


def test_sentence_prompt_mask_is_all_ones(tok):
  p = prompts.sentence_prompt("The cats chase the mice.", tok, example_id="s1")
  assert p.kind == prompts.SENTENCE and p.text == "The cats chase the mice."
  assert p.update_mask_T.shape == (len(p),) and np.all(p.update_mask_T == 1.0)
  tree = spans.span_tree(p, parse_trees("(S (NP The cats) (VP chase (NP the mice)) .)"))
  assert tree.root.label == spans.ROOT and [c.label for c in tree.root.children] == ["S"]
  assert tree.masked == () and np.all(tree.update_mask_T() == 1.0)


def test_empty_question_is_an_error_naming_the_example(tok):
  with pytest.raises(prompts.PromptError, match="example q-77: empty question"):
    prompts.mcqa_prompt("   ", ["a", "b"], tok, example_id="q-77")
  with pytest.raises(prompts.PromptError, match="example q-78: no options"):
    prompts.PromptFormat().prompt({"id": "q-78", "question": "Why?", "options": []}, tok)
  with pytest.raises(prompts.PromptError, match="example q-79: a record needs"):
    prompts.PromptFormat().prompt({"id": "q-79", "text": "Why?"}, tok)


def test_left_truncation_is_counted_and_the_tree_follows(tok):
  full = prompts.mcqa_prompt(QUESTION, ["cats", "dogs"], tok, example_id="t")
  assert full.truncated == 0
  cut = prompts.mcqa_prompt(QUESTION, ["cats", "dogs"], tok, example_id="t", max_len=24)
  assert len(cut) == 24 and cut.truncated == len(full) - 24
  np.testing.assert_array_equal(cut.ids_T, full.ids_T[-24:])
  np.testing.assert_array_equal(cut.update_mask_T, full.update_mask_T[-24:])
  tree = spans.span_tree(cut, parse_trees(QUESTION_TREE))
  assert tree.n_tokens == 24
  assert all(0 <= n.start < n.end <= 24 for n in tree.nodes())
  # Words whose tokens were all cut are gone; "animals" lost its first tokens only.
  leaves = words_of(tree)
  assert "Which" not in leaves and "chase" in leaves and "animals" in leaves
  texts = token_texts(cut)
  assert "".join(texts[slice(*leaves["chase"])]).strip() == "chase"
  # A PromptFormat's max_len bounds the row: 24 = 23 prompt tokens + the answer letter.
  fmt = prompts.PromptFormat(max_len=25)
  assert fmt.prompt({"id": "t", "question": QUESTION, "options": ["cats", "dogs"]},
                    tok).truncated == cut.truncated
  assert prompts.PromptFormat.from_meta(fmt.to_meta()) == fmt
  # A cache written before answer_tokens existed cut MCQA prompts to max_len itself.
  old = prompts.PromptFormat.from_meta({"prompt_format": json.dumps(
      {"max_len": 24, "chat": False, "bos": False})})
  assert old.answer_tokens == 0 and len(old.prompt(
      {"id": "t", "question": QUESTION, "options": ["cats", "dogs"]}, tok)) == 24
  with pytest.raises(prompts.PromptError, match="example t: max_len 1 leaves no room"):
    prompts.PromptFormat(max_len=1).prompt(
        {"id": "t", "question": QUESTION, "options": ["cats", "dogs"]}, tok)
  assert len(prompts.PromptFormat(max_len=5).prompt({"id": "s", "sentence": QUESTION}, tok)) == 5


def test_chat_template_shifts_the_fields(tok):
  chat = prompts.TextTokenizer(tok.tokenizer,
                               chat_template=lambda c, s=None: f"<sys>{s}\n<user>\n{c}\n<bot>")
  p = prompts.PromptFormat(chat=True).prompt(
      {"id": "c", "question": QUESTION, "options": ["cats", "dogs"]}, chat)
  assert p.text.startswith(f"<sys>{prompts.MCQA_SYSTEM}\n<user>\n")
  assert p.field_text(p.parse_fields[0]) == QUESTION
  # `Answer:` after the assistant header, on a line of its own (… the end)
  assert p.text.endswith("\n<bot>\nAnswer:") and p.field_text(p.answer) == "Answer:"
  assert "".join(t for t, m in zip(token_texts(p), p.update_mask_T) if m == 0) == (
      "Options:\nA. cats\nB. dogs")
  with pytest.raises(prompts.PromptError, match="chat template"):
    prompts.PromptFormat(chat=True).prompt({"id": "c", "sentence": "Hi."}, tok)


# ---- alignment and the span tree -----------------------------------------------------------

def test_words_split_into_several_tokens_align_by_character_overlap(tok):
  p = prompts.mcqa_prompt(QUESTION, ["cats", "dogs"], tok, example_id="a", bos_id=tok.bos_id)
  assert p.ids_T[0] == 0 and tuple(p.offsets_T2[0]) == (0, 0)  # BOS: zero width, m = 1
  tree = spans.span_tree(p, parse_trees(QUESTION_TREE))
  texts = token_texts(p)
  leaves = words_of(tree)
  start, end = leaves["unbelievable"]
  assert end - start > 3  # several sub-word tokens
  assert "".join(texts[start:end]).strip() == "unbelievable"
  for word in ("Which", "animals", "chase", "mice", "?"):
    assert "".join(texts[slice(*leaves[word])]).strip() == word
  # Every token of a word overlaps its characters (no neighbour is pulled in).
  for word, (s, e) in leaves.items():
    if word in ("A", "B", spans.ANSWER):
      continue
    at = p.text.index(word, p.parse_fields[0][0])
    assert all(p.offsets_T2[t, 0] < at + len(word) and p.offsets_T2[t, 1] > at
               for t in range(s, e)), word
  # Structure: ROOT → [question tree, OPTIONS → A, B, ANSWER]; nodes are unions of children.
  root = tree.root
  assert [c.label for c in root.children] == ["SBARQ", spans.OPTIONS, spans.ANSWER]
  options = root.children[1]
  assert [c.label for c in options.children] == ["A", "B"]
  assert "".join(texts[options.start:options.end]) == "A. cats\nB. dogs"
  assert "".join(texts[root.children[2].start:root.children[2].end]) == "Answer:"
  whnp = root.children[0].children[0]
  assert (whnp.label, whnp.start, whnp.end) == ("WHNP", leaves["Which"][0], leaves["animals"][1])
  assert tree.masked == ((int(np.flatnonzero(p.update_mask_T == 0)[0]),
                          int(np.flatnonzero(p.update_mask_T == 0)[-1]) + 1),)


def test_escaped_leaves_are_found_in_the_raw_text(tok):
  p = prompts.mcqa_prompt('Do "cats" (really) chase mice?', ["yes"], tok, example_id="e")
  tree = spans.span_tree(p, parse_trees(
      "(SQ Do (NP `` cats '') (PRN -LRB- really -RRB-) (VP chase mice) ?)"))
  texts = token_texts(p)
  leaves = words_of(tree)
  assert "".join(texts[slice(*leaves["-LRB-"])]).strip() == "("
  assert "".join(texts[slice(*leaves["``"])]).strip().startswith('"')


def test_a_tree_not_covering_the_question_is_an_error(tok):
  p = prompts.mcqa_prompt(QUESTION, ["cats", "dogs"], tok, example_id="bad-1")
  with pytest.raises(spans.SpanError, match="example bad-1: tree word 0 'Dogs'"):
    spans.span_tree(p, parse_trees("(S Dogs bark .)"))
  # Leaves found but a question word is left out of the tree.
  with pytest.raises(spans.SpanError, match="example bad-1: .*do not cover.*'unbelievable"):
    spans.span_tree(p, parse_trees("(SBARQ (WHNP Which animals) (SQ (VP chase mice)) ?)"))
  # The option text is not a parse field: a tree over it is not the question's.
  with pytest.raises(spans.SpanError, match="not in the question text"):
    spans.span_tree(p, parse_trees(f"{QUESTION_TREE} (NP cats)"))


def test_span_tree_json_round_trip(tok):
  p = prompts.mcqa_prompt(QUESTION, ["cats", "dogs"], tok, example_id="j")
  tree = spans.span_tree(p, parse_trees(QUESTION_TREE))
  again = SpanTree.from_json(tree.to_json())
  assert again == tree and again.to_json() == tree.to_json()
  assert SpanTree.from_json(SpanTree(None, 5).to_json()) == SpanTree(None, 5)
  with pytest.raises(ValueError, match="child counts"):
    SpanTree.from_json('{"v":1,"n":3,"masked":[],"nodes":[["R",0,3,2],["a",0,1,0]]}')
  with pytest.raises(ValueError, match="format"):
    SpanTree.from_json('{"v":9,"n":3,"masked":[],"nodes":[]}')


# ---- heights → layers ----------------------------------------------------------------------

def chain(depth: int) -> SpanTree:
  """A right-branching tree of maximum depth `depth` over [0, 2·depth): each level holds a one-token
  leaf on the left and the deeper node on the right; the deepest level holds two leaves."""
  node = SpanNode("L", 2 * depth - 2, 2 * depth, (SpanNode("x", 2 * depth - 2, 2 * depth - 1),
                                                   SpanNode("y", 2 * depth - 1, 2 * depth)))
  for level in range(depth - 1, 0, -1):
    node = SpanNode("N", 2 * level - 2, 2 * depth,
                    (SpanNode("w", 2 * level - 2, 2 * level - 1), node))
  return SpanTree(SpanNode(spans.ROOT, node.start, node.end, node.children), 2 * depth)


def test_chain_helper_depths():
  levels, cut = spans.heights(chain(5))
  assert len(levels) == 6 and cut == 0  # H = 5
  assert levels[-1].tolist() == [[0, 10]]  # height H: the root
  assert levels[0].tolist() == [[8, 9], [9, 10]]  # height 0: the deepest leaves


def test_tree_deeper_than_the_model_reads_heights_0_to_L_minus_1():
  tree = chain(6)  # H = 6
  levels, _ = spans.heights(tree)
  layout = spans.chunk_layout(tree, n_layers=3, k=4)
  for layer in range(3):
    n = len(levels[layer])
    assert layout.start_LK[layer, :n].tolist() == levels[layer][:, 0].tolist()
    assert layout.end_LK[layer, :n].tolist() == levels[layer][:, 1].tolist()
    assert np.all(layout.end_LK[layer, n:] == 0)
  # The last layer reads height 2, not heights 2 … H folded together; the root is read nowhere.
  assert layout.start_LK[2].tolist() == [6, 8, 0, 0] and layout.end_LK[2].tolist() == [7, 12, 0, 0]
  assert not np.any((layout.start_LK == 0) & (layout.end_LK == 12))
  assert layout.unread == sum(len(level) for level in levels[3:])


def test_tree_shallower_than_the_model_reuses_its_top_level():
  tree = chain(2)  # H = 2
  layout = spans.chunk_layout(tree, n_layers=6, k=4)
  assert layout.start_LK[0, :2].tolist() == [2, 3]  # height 0
  assert layout.start_LK[1, :2].tolist() == [0, 2] and layout.end_LK[1, :2].tolist() == [1, 4]
  for layer in range(2, 6):  # min(ℓ, H) = H: the root in every higher layer
    assert layout.start_LK[layer].tolist() == [0, 0, 0, 0]
    assert layout.end_LK[layer].tolist() == [4, 0, 0, 0]
  assert layout.unread == 0 and layout.cut == 0


def test_at_most_k_nodes_per_height_breadth_first_left_to_right():
  leaves = tuple(SpanNode(f"w{i}", i, i + 1) for i in range(70))
  # Two subtrees so that breadth-first order crosses parents: [0, 35) and [35, 70).
  tree = SpanTree(SpanNode(spans.ROOT, 0, 70, (SpanNode("A", 0, 35, leaves[:35]),
                                               SpanNode("B", 35, 70, leaves[35:]))), 70)
  levels, cut = spans.heights(tree, k=64)
  assert cut == 6 and len(levels[0]) == 64
  assert levels[0][:, 0].tolist() == list(range(64))  # left to right, the rightmost 6 cut
  assert levels[1].tolist() == [[0, 35], [35, 70]]
  counts = collections.Counter()
  batch = spans.chunk_batch([tree], n_layers=2, seq_len=70, counts=counts)
  assert counts["chunks_cut"] == 6 and batch.start_BLK.shape == (1, 2, 64)
  assert batch.start_BLK[0, 0].tolist() == list(range(64))


def test_chunk_batch_shapes_padding_and_last():
  trees = [chain(2), SpanTree(SpanNode(spans.ROOT, 1, 3, (SpanNode("a", 1, 2),
                                                         SpanNode("b", 2, 3))), 3, ((1, 2),))]
  batch = spans.chunk_batch(trees, n_layers=3, seq_len=8, k=5)
  assert isinstance(batch, spans.ChunkBatch)
  for name in ("start_BLK", "end_BLK", "last_BLK"):
    array = getattr(batch, name)
    assert array.shape == (2, 3, 5) and array.dtype == np.int32, name
  assert batch.update_mask_BT.shape == (2, 8) and batch.update_mask_BT.dtype == np.float32
  real = batch.end_BLK > batch.start_BLK
  np.testing.assert_array_equal(batch.last_BLK[real], batch.end_BLK[real] - 1)
  assert np.all(batch.last_BLK[~real] == -1)
  assert np.all(batch.start_BLK[~real] == 0) and np.all(batch.end_BLK[~real] == 0)
  assert batch.last_BLK[1].tolist() == [[1, 2, -1, -1, -1], [2, -1, -1, -1, -1],
                                        [2, -1, -1, -1, -1]]
  assert batch.update_mask_BT[1].tolist() == [1, 0, 1, 1, 1, 1, 1, 1]  # padded with 1
  with pytest.raises(ValueError, match="example 0 has 4 tokens, more than seq_len 3"):
    spans.chunk_batch(trees, n_layers=3, seq_len=3)
  empty = spans.chunk_batch([SpanTree(None, 2)], n_layers=2, seq_len=2, k=3)
  assert np.all(empty.last_BLK == -1)
