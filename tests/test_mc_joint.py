"""The paper format's joint parse units (`downstream.mc_joint`): per task, one item built from a
fixture row, its parse input and which tokens the continuation scores, against values written by
hand from qlwpc/TG-Interpolation `olmo/eval/downstream.py` @ cd50d9ef (WinoGrande's gold-filled
sentence cut after the option, HellaSwag's Ctx_b + ending with Ctx_b masked, OpenBookQA's stem +
option lines grafted onto the gold line and cut after their last shared bracket). Hand trees come
from a proposals file, so the parses are fixed."""

from __future__ import annotations

import numpy as np
import pytest

from slm_jax.configurations import CONFIGURATIONS
from slm_jax.data.encode import encode_document
from slm_jax.data.rows import RowReader
from slm_jax.downstream import mc_joint, obqa_graft, paper_format, tasks
from slm_jax.downstream.encoding import TextEncoder, make_tree_source
from slm_jax.downstream.scoring import continuation_scores
from slm_jax.kinds import Kind
from slm_jax.ptb import parse_trees
from slm_jax.tokenizer import make_tokenizer


def parse_tree(text: str):
  return parse_trees(text, normalize=None)[0]


WINOGRANDE = {"sentence": "Sarah was a much better surgeon than Maria so _ always got the harder "
                          "cases.", "option1": "Sarah", "option2": "Maria", "answer": "1"}
WINOGRANDE_TREE = ("(S (S (NP Sarah) (VP was (NP (NP a (ADJP much better) surgeon) (PP than "
                   "(NP Maria))))) so (S (NP Sarah) (VP always got (NP the harder cases))) .)")
HELLASWAG = {"ind": 24, "activity_label": "Roof shingle removal",
             "ctx_a": "A man is sitting on a roof.", "ctx_b": "he",
             "ctx": "A man is sitting on a roof. he",
             "endings": ["is using wrap to wrap a pair of skis.", "is ripping level tiles off.",
                         "is holding a rubik's cube.", "starts pulling up roofing on a roof."],
             "source_id": "activitynet~v_-JhWjGDPHMY", "split": "val",
             "split_type": "indomain", "label": "3"}
HELLASWAG_TREE = ("(S (NP He) (VP is (VP using (NP wrap) (S to (VP wrap (NP (NP a pair) (PP of "
                  "(NP skis))))))) .)")
OPENBOOKQA = {"id": "7-980", "question_stem": "The sun is responsible for",
              "choices": {"text": ["puppies learning new tricks",
                                   "children growing up and getting old",
                                   "flowers wilting in a vase",
                                   "plants sprouting, blooming and wilting"],
                          "label": ["A", "B", "C", "D"]}, "answerKey": "D"}
SUN = "(S (NP The sun) (VP is (ADJP responsible (PP for {}))) .)"
OPENBOOKQA_TREES = [SUN.format("(NP (NP puppies) (VP learning (NP new tricks)))"),
                    # B attaches its PP elsewhere: the graft puts its option under the gold's PP
                    "(S (NP The sun) (VP is (ADJP responsible) (PP for (S (NP children) (VP "
                    "growing up and getting old)))) .)",
                    SUN.format("(NP (NP flowers) (VP wilting (PP in (NP a vase))))"),
                    SUN.format("(NP (NP plants) (VP sprouting , blooming and wilting))")]


def example(task: str, row: dict):
  base = tasks.READERS[task](RowReader("fixture.jsonl", 0, row), task, "")
  return paper_format.corrected(tasks.with_row_fields(base, row))


def encoder(tmp_path, name: str = "tree") -> TextEncoder:
  trees = [WINOGRANDE_TREE, HELLASWAG_TREE] + OPENBOOKQA_TREES
  path = tmp_path / "trees.txt"
  path.write_text("\n\n".join(trees) + "\n")
  words = {w for t in trees for w in parse_tree(t).leaves()}
  words |= set("Roof shingle removal : A man is sitting on a roof . He ripping level tiles off "
               "holding rubik 's cube starts pulling up roofing".split())
  tokenizer = make_tokenizer("word", words=sorted(words))
  return TextEncoder(tokenizer, CONFIGURATIONS[name], make_tree_source(f"file:{path}"))


def lines(enc: TextEncoder, prompt) -> list[str]:
  """The rendered prompt: [context part, (head,) continuation] of the option."""
  encoded = enc.encode(prompt.components, joint=prompt.joint)
  names = list(prompt.roles) + ["head"] * bool(prompt.head) + ["continuation"]
  return enc.render(encoded, names=names).split("\n")[1:]


def test_winogrande_parses_the_gold_filled_sentence_once_and_cuts_after_the_option(tmp_path):
  enc = encoder(tmp_path)
  built = paper_format.build_prompts(example("winogrande", WINOGRANDE))
  filled = "Sarah was a much better surgeon than Maria so Sarah always got the harder cases."
  assert [p.joint.texts for p in built] == [(filled,)] * 2  # the gold's sentence for both
  prefix = ("(S (S (NP Sarah NP) (VP was (NP (NP a (ADJP much better ADJP) surgeon NP) (PP than "
            "(NP Maria NP) PP) NP) VP) S) so (S (NP {} NP) (VP")
  rest = "[continuation] always got (NP the harder cases NP) VP) S) . S)"
  assert lines(enc, built[0]) == ["[question] " + prefix.format("Sarah"), rest]
  assert lines(enc, built[1]) == ["[question] " + prefix.format("Maria"), rest]
  encoded = enc.encode(built[1].components, joint=built[1].joint)
  # one sentence: the tokens of the swapped tree's linearization, cut between (VP and "always"
  swapped = parse_tree(WINOGRANDE_TREE.replace("so (S (NP Sarah)", "so (S (NP Maria)"))
  whole = encode_document([swapped], enc.tokenizer, "lin1")
  np.testing.assert_array_equal(encoded.sequence.tokens, whole.tokens[:-1])
  assert set(encoded.sequence.sentence.tolist()) == {0}
  cut = list(enc.tokenizer.decode(whole.tokens)).index("always")
  np.testing.assert_array_equal(encoded.component_T[1:], np.arange(1, len(whole) - 1) >= cut)
  assert not enc.joint_stats


def test_winogrande_scan_lets_bracket_characters_match_as_the_code_does():
  """`left` = "x so A": the "A" of `<(ADJP>` after "so" ends the code's scan one word early."""
  trees = [parse_tree("(S (NP x) (VP so (ADJP A b)))")]
  symbols, _ = mc_joint.tg_symbols(trees, ["x", "so", "A", "b"])
  assert "".join(symbols) == "<(S><(NP> x<NP)><(VP> so<(ADJP> A b<ADJP)><VP)><S)>"
  assert mc_joint.answer_word(symbols, "x so A") == 1
  words_only = [s if s.startswith(" ") else "" for s in symbols]  # the words alone: one later
  assert mc_joint.answer_word(words_only, "x so A") == 2


def test_winogrande_multi_word_gold_is_counted_and_ties(tmp_path):
  row = {"sentence": "Sarah was a much better surgeon than Maria so _ always got the harder "
                     "cases.", "option1": "the Sarah", "option2": "Maria", "answer": "1"}
  enc = encoder(tmp_path, "terminal")
  built = paper_format.build_prompts(example("winogrande", row))
  assert lines(enc, built[0]) == lines(enc, built[1])  # both read the gold context
  assert enc.joint_stats == {"multiword_gold": 2}


def test_hellaswag_parses_ctx_b_with_the_ending_and_masks_it(tmp_path):
  enc = encoder(tmp_path)
  x = example("hellaswag", HELLASWAG)
  built = paper_format.build_prompts(x)
  assert built[0].joint.texts == ("He is using wrap to wrap a pair of skis.",)
  assert [p.joint.masked for p in built] == [" He"] * 4
  encoded = enc.encode(built[0].components, joint=built[0].joint)
  unit = encode_document([parse_tree(HELLASWAG_TREE)], enc.tokenizer, "lin1")
  n = len(unit) - 2  # the unit's tokens, without its BOS / EOS, end the prompt
  np.testing.assert_array_equal(encoded.sequence.tokens[-n:], unit.tokens[1:-1])
  symbols = enc.tokenizer.decode(encoded.sequence.tokens[-n:])
  head = encoded.component_T[-n:] == 1
  scored = (encoded.component_T[-n:] == 2) & (encoded.sequence.kinds[-n:] == Kind.TERMINAL)
  assert [s for s, h in zip(symbols, head) if h] == ["He"]  # conditioned on, not scored
  assert [s for s, k in zip(symbols, scored) if k] == "is using wrap to wrap a pair of skis .".split()
  assert symbols[:3] == ["(S", "(NP", "He"] and not head[:2].any()  # its brackets stay scored
  assert [p.option_chars for p in built] == [41, 31, 31, 40]  # the head counts in the divisor


def test_openbookqa_grafts_each_option_onto_the_gold_line_and_cuts_after_the_shared_bracket(
    tmp_path):
  enc = encoder(tmp_path)
  built = paper_format.build_prompts(example("openbookqa", OPENBOOKQA))
  assert built[0].joint.texts == ("The sun is responsible for puppies learning new tricks.",
                                  "The sun is responsible for children growing up and getting old.",
                                  "The sun is responsible for flowers wilting in a vase.",
                                  "The sun is responsible for plants sprouting, blooming and "
                                  "wilting.")
  context = "[question] (S (NP The sun NP) (VP is (ADJP responsible (PP"  # B's "(S" differs
  closers = " PP) ADJP) VP) . S)"
  want = ["for (NP (NP puppies NP) (VP learning (NP new tricks NP) VP) NP)",
          "for (S (NP children NP) (VP growing up and getting old VP) S)",
          "for (NP (NP flowers NP) (VP wilting (PP in (NP a vase NP) PP) VP) NP)",
          "for (NP (NP plants NP) (VP sprouting , blooming and wilting VP) NP)"]
  assert [lines(enc, p) for p in built] == [[context, f"[continuation] {w}{closers}"]
                                            for w in want]
  scores = continuation_scores(ZeroScorer(enc), enc, built)
  assert [s.chars for s in scores] == [33, 41, 31, 45]  # " for …" without its leading space
  assert [s.terminals for s in scores] == [6, 8, 7, 8]  # "for" … "."


def terminal_words(enc: TextEncoder, prompt) -> list[str]:
  """The words the continuation scores (its terminal tokens, as symbols)."""
  encoded = enc.encode(prompt.components, joint=prompt.joint)
  scored = ((encoded.component_T == len(prompt.components) - 1)
            & (encoded.sequence.kinds == Kind.TERMINAL))
  return enc.tokenizer.decode(encoded.sequence.tokens[scored])


def test_openbookqa_terminal_format_scores_the_tree_formats_words_grafts_included(tmp_path):
  """The code cuts its parsed lines, grafted, before converting them to any format: the terminal
  format scores " for …" as the tree format does (B's own parse attaches its PP elsewhere: only
  the graft lets all four lines share "<(PP>"). Before, the terminal format cut at each option's
  first word ("puppies …", 29 characters) and never grafted."""
  built = paper_format.build_prompts(example("openbookqa", OPENBOOKQA))
  tree, terminal = encoder(tmp_path), encoder(tmp_path, "terminal")
  words = [terminal_words(tree, p) for p in built]
  assert words[0] == "for puppies learning new tricks .".split()
  assert [terminal_words(terminal, p) for p in built] == words
  assert [lines(terminal, p)[0] for p in built] == ["[question] The sun is responsible"] * 4
  assert [s.chars for s in continuation_scores(ZeroScorer(terminal), terminal, built)] == [
      33, 41, 31, 45]
  assert terminal.joint_stats == tree.joint_stats


def test_winogrande_terminal_format_cuts_where_the_parse_does(tmp_path):
  """The code's scan reads the bracket line in every format: `<(ADJP>`'s "A" ends it after
  "so", so " A b ." is the continuation of the terminal format too (before: " b .")."""
  row = {"sentence": "x so _ b.", "option1": "A", "option2": "C", "answer": "1"}
  path = tmp_path / "trees.txt"
  path.write_text("(S (NP x) (VP so (ADJP A b)) .)\n")
  tokenizer = make_tokenizer("word", words="x so A C b .".split())
  prompt = paper_format.build_prompts(example("winogrande", row))[0]
  for name in ("tree", "terminal"):
    enc = TextEncoder(tokenizer, CONFIGURATIONS[name], make_tree_source(f"file:{path}"))
    assert terminal_words(enc, prompt) == ["A", "b", "."], name


def test_graft_keeps_a_line_whose_option_is_not_found_and_counts_it():
  lines_ = [[parse_tree(t)] for t in OPENBOOKQA_TREES]
  options = ["puppies learning new tricks", "kittens", "flowers wilting in a vase",
             "plants sprouting, blooming and wilting"]
  grafted, events = obqa_graft.graft(lines_, options, 3)
  assert events == [(), ("not_grafted",), (), ()] and grafted[1] == lines_[1]
  assert grafted[0][0].to_bracketed() == SUN.format(
      "(NP (NP puppies) (VP learning (NP new tricks)))")


# Options spanning two sentences (the gold A and C): the paper code finds A across the line's
# trees (`find_choice_in_line`, multi-tree mode: it starts at leaf 5 of tree 0), grafts every
# option's node at A's node in A's first tree and appends each option's own trees after its
# start tree (C's "They rest ."); B keeps only the gold's first tree. Today's code found A in no
# last tree and left all four lines as parsed.
MULTI = {"id": "9-999", "question_stem": "The sun is responsible for",
         "choices": {"text": ["plants growing. They need light", "flowers wilting",
                              "animals sleeping. They rest", "puppies learning new tricks"],
                     "label": ["A", "B", "C", "D"]}, "answerKey": "A"}
MULTI_TREES = [SUN.format("(NP (NP plants) (VP growing))"),
               "(S (NP They) (VP need (NP light)) .)",
               "(S (NP The sun) (VP is (ADJP responsible) (PP for (NP (NP flowers) (VP wilting))))"
               " .)",
               SUN.format("(S (NP animals) (VP sleeping))"),
               "(S (NP They) (VP rest) .)",
               OPENBOOKQA_TREES[0]]


def test_openbookqa_grafts_options_that_span_sentences_as_the_code_does(tmp_path):
  path = tmp_path / "multi.txt"
  path.write_text("\n\n".join(MULTI_TREES) + "\n")
  words = {w for t in MULTI_TREES for w in parse_tree(t).leaves()}
  enc = TextEncoder(make_tokenizer("word", words=sorted(words)), CONFIGURATIONS["tree"],
                    make_tree_source(f"file:{path}"))
  built = paper_format.build_prompts(example("openbookqa", MULTI))
  assert built[0].joint.texts[0] == "The sun is responsible for plants growing. They need light."
  context = "[question] (S (NP The sun NP) (VP is (ADJP responsible (PP"
  closers = " PP) ADJP) VP) . S)"
  want = ["for (NP (NP plants NP) (VP growing VP) NP)" + closers
          + " (S (NP They NP) (VP need (NP light NP) VP) . S)",
          "for (NP (NP flowers NP) (VP wilting VP) NP)" + closers,  # the gold's PP, no 2nd tree
          "for (S (NP animals NP) (VP sleeping VP) S)" + closers
          + " (S (NP They NP) (VP rest VP) . S)",
          "for (NP (NP puppies NP) (VP learning (NP new tricks NP) VP) NP)" + closers]
  assert [lines(enc, p) for p in built] == [[context, f"[continuation] {w}"] for w in want]
  scores = continuation_scores(ZeroScorer(enc), enc, built)
  # "for plants growing . They need light ." = 38 characters, "for flowers wilting ." = 21, …
  assert [s.chars for s in scores] == [38, 21, 34, 33]
  assert enc.joint_stats == {"multi_tree": 4, "grafted": 4} and "not_grafted" not in enc.joint_stats


def test_hellaswag_masks_ctx_b_on_the_token_ids_of_the_plain_string(tmp_path):
  """GPT-2 reads the code's plain " Then, the man" as " Then" "," " the" " man"; the parse's
  words give " Then" " ," " the" " man". `get_mask` masks " Then", finds no "," after it and
  stops: ", the man" is scored (matching words masked all four)."""
  row = dict(HELLASWAG, ctx_b="then, the man", endings=["runs to the car."] * 4, label="0")
  tree = "(S (ADVP Then) , (NP the man) (VP runs (PP to (NP the car))) .)"
  path = tmp_path / "trees.txt"
  path.write_text(tree + "\n")
  enc = TextEncoder(make_tokenizer("gpt2"), CONFIGURATIONS["tree"],
                    make_tree_source(f"file:{path}"))
  prompt = paper_format.build_prompts(example("hellaswag", row))[0]
  assert prompt.joint.texts == ("Then, the man runs to the car.",)
  assert prompt.joint.masked == " Then, the man"
  encoded = enc.encode(prompt.components, joint=prompt.joint)
  unit = len(encode_document([parse_tree(tree)], enc.tokenizer, "lin1")) - 2
  symbols = [s.strip() for s in enc.tokenizer.decode(encoded.sequence.tokens[-unit:])]
  part = encoded.component_T[-unit:]
  terminal = encoded.sequence.kinds[-unit:] == Kind.TERMINAL
  assert [s for s, p in zip(symbols, part) if p == 1] == ["Then"]  # the only token masked
  assert [s for s, p, t in zip(symbols, part, terminal) if p == 2 and t] == (
      ", the man runs to the car .".split())
  words = TextEncoder(make_tokenizer("word", words=parse_tree(tree).leaves()),
                      CONFIGURATIONS["tree"], make_tree_source(f"file:{path}"))
  part = words.encode(prompt.components, joint=prompt.joint).component_T[-unit:]
  assert (part == 1).sum() == 4  # a word-level base reads text as PTB words: all of Ctx_b
  # counted: GPT-2's matching stopped short of the head, the word base's found all of it
  assert enc.joint_stats == {"head_unmasked": 1} and words.joint_stats == {"head_masked": 1}


def test_masked_tokens_equals_the_codes_get_mask_loop():
  rng = np.random.default_rng(0)
  for _ in range(200):
    ids = rng.integers(0, 6, rng.integers(1, 30))
    kinds = np.where(rng.random(len(ids)) < 0.2, Kind.PAUSE, Kind.TERMINAL).astype(np.int8)
    kinds[0] = Kind.TERMINAL
    wanted = rng.integers(0, 6, rng.integers(0, 6)).tolist()
    real = np.flatnonzero(kinds != Kind.PAUSE)
    mask, i, j = [1] * len(real), 0, 0  # get_mask, as the code writes it, on the real tokens
    while i < len(real) and j < len(wanted):
      if ids[real][i] == wanted[j]:
        mask[i] = 0
        j += 1
      i += 1
    want = np.zeros(len(ids), bool)
    want[real] = np.asarray(mask) == 0
    for t in range(1, len(ids)):  # a pause token follows its token
      if kinds[t] == Kind.PAUSE:
        want[t] = want[t - 1]
    np.testing.assert_array_equal(mc_joint.masked_tokens(ids, kinds, wanted), want)


def test_demonstrations_are_one_component_per_joint_unit():
  shot = paper_format.demonstration(example("winogrande", WINOGRANDE))
  assert shot == ("Sarah was a much better surgeon than Maria so Sarah always got the harder "
                  "cases.",)
  assert paper_format.demonstration(example("openbookqa", OPENBOOKQA)) == (
      "The sun is responsible for plants sprouting, blooming and wilting.",)
  assert paper_format.demonstration(example("hellaswag", HELLASWAG))[-1] == (
      " He starts pulling up roofing on a roof.")


class ZeroScorer:
  """A scorer whose every log-probability is −1 (what is summed is then the token count)."""

  def __init__(self, enc: TextEncoder):
    self.configuration = enc.configuration

  def logprobs(self, sequences):
    return [np.full(len(s) - 1, -1.0) for s in sequences]

  def target_mask(self, kinds):
    return np.ones(len(kinds), bool)


def test_a_joint_unit_needs_its_two_components(tmp_path):
  enc = encoder(tmp_path)
  joint = paper_format.build_prompts(example("winogrande", WINOGRANDE))[0].joint
  with pytest.raises(ValueError, match="two components"):
    enc.encode(["x"], joint=joint)
