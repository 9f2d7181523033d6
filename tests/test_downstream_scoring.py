"""Multiple-choice scoring (SPEC §11) against the model's own forward pass on the unpadded
sequence: S_full, S_term, the per-character normalization, WinoGrande partial and BoolQ raw sums,
for a terminal, a tree, a tgtree and a tg model; resuming after a kill; MMLU macro; ties."""

from __future__ import annotations

import hashlib
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from slm_jax.configurations import CONFIGURATIONS
from slm_jax.data.encode import encode_document
from slm_jax.downstream.encoding import make_tree_source
from slm_jax.downstream.example import TaskExample
from slm_jax.downstream.scoring import decide, evaluate_task, summarize
from slm_jax.identity import IdentityError
from slm_jax.inference.scorer import Scorer
from slm_jax.kinds import Kind
from slm_jax.model import Decoder, ModelConfig
from slm_jax.structure import target_mask
from slm_jax.tokenizer import make_tokenizer
from slm_jax.trees import Tree
from tests.test_scorer import direct_logprobs

WORDS = ("Question : What do cats chase ? Answer mice dogs when run . no yes Question do "
         "The following are multiple choice questions about zoology").split()
TOKENIZER = make_tokenizer("word", words=WORDS)
QA = [("Question", ":", "What", "do", "cats", "chase", "?"), ("Answer", ":")]

# Per task: two items, each with per option (context sentences, continuation sentences, chars).
ARC = [TaskExample("arc_easy", "What do cats chase?", ("mice", "dogs run"), 0, "arc:1"),
       TaskExample("arc_easy", "What do cats chase?", ("dogs", "mice run ."), 1, "arc:2")]
ARC_WORDS = [[(QA, [("mice",)], 4), (QA, [("dogs", "run")], 8)],
             [(QA, [("dogs",)], 4), (QA, [("mice", "run", ".")], 10)]]
WINO = [TaskExample("winogrande", "cats chase _ when mice run.", ("mice", "dogs"), 0, "w:1"),
        TaskExample("winogrande", "dogs chase _ when cats run.", ("cats", "mice"), 1, "w:2")]
WINO_WORDS = [[([("cats", "chase", "mice")], [("when", "mice", "run", ".")], 14),
               ([("cats", "chase", "dogs")], [("when", "mice", "run", ".")], 14)],
              [([("dogs", "chase", "cats")], [("when", "cats", "run", ".")], 14),
               ([("dogs", "chase", "mice")], [("when", "cats", "run", ".")], 14)]]
BOOLQ = [TaskExample("boolq", "do cats chase mice", ("no", "yes"), 1, "b:1",
                     passage="cats chase mice."),
         TaskExample("boolq", "do dogs run", ("no", "yes"), 0, "b:2", passage="dogs run.")]
BOOLQ_CONTEXT = [[("cats", "chase", "mice", "."), ("Question", ":", "do", "cats", "chase",
                                                   "mice", "?"), ("Answer", ":")],
                 [("dogs", "run", "."), ("Question", ":", "do", "dogs", "run", "?"),
                  ("Answer", ":")]]
BOOLQ_WORDS = [[(c, [(o,)], len(o)) for o in ("no", "yes")] for c in BOOLQ_CONTEXT]
TASKS = {"arc_easy": (ARC, ARC_WORDS), "winogrande": (WINO, WINO_WORDS),
         "boolq": (BOOLQ, BOOLQ_WORDS)}


def scorer_for(name, seed=0, batch_size=3, cls=Scorer):
  configuration = CONFIGURATIONS[name]
  config = ModelConfig(vocab_size=TOKENIZER.vocab_size, d_model=32, n_layers=2, n_heads=4,
                       compute_dtype=jnp.float32, init_std=0.2,
                       attention=configuration.attention)
  return cls(Decoder(config, rngs=nnx.Rngs(seed)), TOKENIZER, configuration,
             batch_size=batch_size)


def direct_option(scorer, context, continuation, chars):
  """(S_full, S_term, S_term / chars) from trees built by hand and the unpadded forward."""
  configuration = scorer.configuration
  structured = configuration.scheme.scored_with_structure
  lin = configuration.scheme.scored_as
  trees = [Tree("S" if structured else "X", w) for w in list(context) + list(continuation)]
  whole = encode_document(trees, TOKENIZER, lin)
  sequence = whole.take(np.arange(len(whole) - 1))  # no EOS
  n = len(encode_document(trees[-len(continuation):],
                          TOKENIZER, lin)) - 2
  lp = direct_logprobs(scorer.model, sequence)[-n:]
  kinds = sequence.kinds[-n:]
  targets = target_mask(sequence.kinds, np.ones_like(sequence.kinds), lin,
                        configuration.attention)[-n:]
  if structured:
    assert (kinds != Kind.TERMINAL).any()  # the continuation carries its own brackets
  term = lp[kinds == Kind.TERMINAL].sum()
  return lp[targets].sum(), term, term / chars


@pytest.mark.parametrize("name", ["terminal", "tree", "tgtree",
                                  pytest.param("tg", marks=pytest.mark.slow)])
def test_scores_equal_a_direct_forward_pass(name, tmp_path):
  scorer = scorer_for(name)
  for task, (examples, words) in TASKS.items():
    if name == "tg" and task != "arc_easy":
      continue  # tg: CNT2 leaves S_full (SPEC §4); one task shows it
    summary = evaluate_task(scorer, task, examples, None, tmp_path, make_tree_source("flat"),
                            progress=False)
    records = [json.loads(line) for line in (tmp_path / f"{task}.jsonl").read_text().splitlines()]
    assert [r["index"] for r in records] == [0, 1] and summary["items"] == 2
    for example, record, item in zip(examples, records, words):
      expected = [direct_option(scorer, *option) for option in item]
      for got, (full, term, norm) in zip(record["options"], expected):
        assert got["full"] == pytest.approx(full, abs=1e-4), (task, name)
        assert got["term"] == pytest.approx(term, abs=1e-4), (task, name)
        assert got["norm"] == pytest.approx(norm, abs=1e-4), (task, name)
        if name == "terminal":
          assert got["full"] == pytest.approx(got["term"], abs=1e-9)
        else:
          assert got["full"] < got["term"] - 1e-3  # structure tokens are in S_full only
      ranked = [e[2] if task == "arc_easy" else e[1] for e in expected]  # norm vs raw sum
      assert record["prediction"] == int(np.argmax(ranked)) and record["gold"] == example.answer
      assert record["correct"] == (record["prediction"] == example.answer)
      ranked_full = [e[0] / o[2] if task == "arc_easy" else e[0] for e, o in zip(expected, item)]
      assert record["prediction_full"] == int(np.argmax(ranked_full))
    assert summary["accuracy"] == np.mean([r["correct"] for r in records])


def test_winogrande_context_holds_the_option_and_demonstrations_precede(tmp_path):
  scorer = scorer_for("tree")
  summary = evaluate_task(scorer, "winogrande", WINO[1:], WINO[:1], tmp_path,
                          make_tree_source("flat"), progress=False)
  record = json.loads((tmp_path / "winogrande.jsonl").read_text())
  demo = [("cats", "chase", "mice"), ("when", "mice", "run", ".")]
  for got, (context, continuation, chars) in zip(record["options"], WINO_WORDS[1]):
    full, term, _ = direct_option(scorer, demo + context, continuation, chars)
    assert got["full"] == pytest.approx(full, abs=1e-4)
    assert got["term"] == pytest.approx(term, abs=1e-4)
  assert record["shots"] == 1 and summary["accuracy"] == float(record["correct"])


def test_the_summary_counts_joint_units_in_the_paper_format_only(tmp_path):
  scorer, source = scorer_for("tree"), make_tree_source("flat")
  paper = evaluate_task(scorer, "winogrande", WINO[1:], None, tmp_path / "paper", source,
                        progress=False, mc_format="paper")
  assert isinstance(paper["joint_units"], dict) and "raw_text" not in paper
  olmes = evaluate_task(scorer, "winogrande", WINO[1:], None, tmp_path / "olmes", source,
                        progress=False)
  assert "joint_units" not in olmes and "raw_text" not in olmes


class Killed(RuntimeError):
  pass


class DyingScorer(Scorer):
  """Raises on the call after `lives` calls of `logprobs` (a kill between chunks)."""
  lives = 10 ** 9
  calls = 0

  def logprobs(self, sequences):
    if self.calls >= self.lives:
      raise Killed()
    self.calls += 1
    return super().logprobs(sequences)


def test_resume_after_a_kill_and_a_truncated_line(tmp_path):
  examples = [TaskExample("arc_easy", q, o, a, f"arc:{n}") for n, (q, o, a) in enumerate(
      [("What do cats chase?", ("mice", "dogs"), 0), ("What do dogs chase?", ("cats", "mice"), 1),
       ("What do mice chase?", ("cats", "dogs run"), 0), ("What run?", ("dogs", "mice"), 1),
       ("What do cats do?", ("run", "chase mice"), 0)])]
  source = make_tree_source("flat")
  reference = evaluate_task(scorer_for("tree"), "arc_easy", examples, ARC[:1], tmp_path / "ref",
                            source, chunk_items=2, progress=False)
  expected = (tmp_path / "ref" / "arc_easy.jsonl").read_text().splitlines()
  dying = scorer_for("tree", cls=DyingScorer)
  dying.lives = 1
  with pytest.raises(Killed):
    evaluate_task(dying, "arc_easy", examples, ARC[:1], tmp_path / "run", source,
                  chunk_items=2, progress=False)
  path = tmp_path / "run" / "arc_easy.jsonl"
  assert path.read_text().splitlines() == expected[:2]  # the first chunk was flushed
  dying.lives, dying.calls = 1, 0
  with pytest.raises(Killed):
    evaluate_task(dying, "arc_easy", examples, ARC[:1], tmp_path / "run", source,
                  chunk_items=2, progress=False)
  assert len(path.read_text().splitlines()) == 4
  path.write_text(path.read_text()[:-25])  # a kill in the middle of the 4th line
  dying.lives, dying.calls = 10, 0
  resumed = evaluate_task(dying, "arc_easy", examples, ARC[:1], tmp_path / "run", source,
                          chunk_items=2, progress=False)
  assert resumed["resumed"] == 3 and resumed["scored_now"] == 2 and dying.calls == 1
  records = sorted(map(json.loads, path.read_text().splitlines()), key=lambda r: r["index"])
  for got, want in zip(records, map(json.loads, expected), strict=True):
    scores = lambda r: [[o[k] for k in ("full", "term", "norm")] for o in r.pop("options")]
    np.testing.assert_allclose(scores(got), scores(want), atol=1e-4)  # batching: float noise
    assert got == want
  again = evaluate_task(dying, "arc_easy", examples, ARC[:1], tmp_path / "run", source,
                        progress=False)
  assert again["scored_now"] == 0 and dying.calls == 1
  for key in ("accuracy", "accuracy_full", "ties", "nonfinite", "items"):
    assert resumed[key] == again[key] == reference[key]
  with pytest.raises(IdentityError, match="holds results"):
    evaluate_task(scorer_for("terminal"), "arc_easy", examples, ARC[:1], tmp_path / "run",
                  source, progress=False)


def test_items_scored_by_another_checkpoint_are_not_reused(tmp_path):
  """BAD 4: the item meta records the checkpoint (step + content digest); a rerun of the
  same configuration from another checkpoint is refused naming the differing keys."""
  source = make_tree_source("flat")
  first, other = scorer_for("tree", seed=0), scorer_for("tree", seed=1)
  made_by = lambda scorer, step: {"step": step, "digest": hashlib.sha256(b"".join(
      np.asarray(x).tobytes() for x in jax.tree.leaves(
          nnx.to_pure_dict(nnx.state(scorer.model, nnx.Param))))).hexdigest()}
  assert made_by(first, 5) == made_by(scorer_for("tree", seed=0), 5)
  evaluate_task(first, "arc_easy", ARC, None, tmp_path, source, progress=False,
                made_by=made_by(first, 5))
  meta = json.loads((tmp_path / "arc_easy.meta.json").read_text())
  assert meta["checkpoint"] == made_by(first, 5)
  with pytest.raises(IdentityError, match=r"checkpoint.digest: '[0-9a-f]+' in the file, "
                     r"'[0-9a-f]+' now.*delete .*arc_easy.jsonl to score again"):
    evaluate_task(other, "arc_easy", ARC, None, tmp_path, source, progress=False,
                  made_by=made_by(other, 5))
  with pytest.raises(IdentityError, match=r"checkpoint.step: 5 in the file, 9 now"):
    evaluate_task(first, "arc_easy", ARC, None, tmp_path, source, progress=False,
                  made_by=made_by(first, 9))
  again = evaluate_task(first, "arc_easy", ARC, None, tmp_path, source, progress=False,
                        made_by=made_by(first, 5))
  assert again["scored_now"] == 0
  (tmp_path / "arc_easy.meta.json").unlink()  # items that cannot say what scored them
  with pytest.raises(IdentityError, match=r"arc_easy.jsonl has no arc_easy.meta.json"):
    evaluate_task(first, "arc_easy", ARC, None, tmp_path, source, progress=False,
                  made_by=made_by(first, 5))


def test_mmlu_is_macro_averaged_over_subjects(tmp_path):
  def record(group, correct):
    return dict(group=group, gold=0, correct=correct, correct_full=correct, tie=False,
                nonfinite=False)
  summary = summarize("mmlu", [record("a", True), record("a", False), record("a", False),
                               record("b", True)])
  assert summary["accuracy"] == pytest.approx((1 / 3 + 1) / 2)
  assert summary["accuracy_by_group"] == {"a": pytest.approx(1 / 3), "b": 1.0}
  assert summarize("arc_easy", [record("a", True), record("a", False), record("a", False),
                                record("b", True)])["accuracy"] == 0.5
  examples = [TaskExample("mmlu", "What do cats chase?", ("mice", "dogs"), 0, f"m:{n}",
                          group=group) for n, group in enumerate(("zoology", "zoology", "cats"))]
  demos = {"zoology": examples[:1], "cats": []}
  result = evaluate_task(scorer_for("terminal"), "mmlu", examples, demos, tmp_path,
                         None, progress=False)
  records = [json.loads(line) for line in (tmp_path / "mmlu.jsonl").read_text().splitlines()]
  assert [r["shots"] for r in records] == [1, 1, 0]
  assert result["accuracy"] == pytest.approx(np.mean([
      np.mean([r["correct"] for r in records[:2]]), float(records[2]["correct"])]))


def test_ties_and_nonfinite_scores_are_wrong_and_counted(tmp_path):
  examples = [TaskExample("arc_easy", "What do cats chase?", ("mice", "mice"), 0, "t:1"),
              TaskExample("arc_easy", "What do cats chase?", ("mice", "dogs"), 0, "t:2")]
  summary = evaluate_task(scorer_for("tree"), "arc_easy", examples, None, tmp_path,
                          make_tree_source("flat"), progress=False)
  first = json.loads((tmp_path / "arc_easy.jsonl").read_text().splitlines()[0])
  assert first["tie"] and first["prediction"] == -1 and not first["correct"]
  assert summary["ties"] == 1 and summary["accuracy"] <= 0.5
  assert decide([float("nan"), -1.0]) == (-1, False, True)
  assert decide([-float("inf"), -1.0]) == (-1, False, True)
  assert decide([-2.0, -1.0, -1.0]) == (-1, True, False)
  assert decide([-1.0, -1.0, -0.5]) == (2, False, False)  # a tie below the best is no tie
  assert summarize("arc_easy", [dict(group="", gold=0, correct=False, correct_full=False,
                                     tie=False, nonfinite=True)])["nonfinite"] == 1


def test_shots_are_dropped_to_fit_max_len(tmp_path):
  summary = evaluate_task(scorer_for("tree"), "arc_easy", ARC, ARC, tmp_path,
                          make_tree_source("flat"), max_len=40, progress=False)
  records = [json.loads(line) for line in (tmp_path / "arc_easy.jsonl").read_text().splitlines()]
  assert summary["fewer_shots"] == 2 and all(r["shots"] < 2 for r in records)


def test_summary_reports_olmes_raw_and_per_char_accuracy():
  def option(term, chars):
    return {"term": term, "chars": chars}
  records = [  # raw picks option 1, per character option 0
      {"gold": 0, "group": "", "tie": False, "nonfinite": False, "correct": True,
       "correct_full": True, "options": [option(-6.0, 6), option(-4.0, 2)]},
      {"gold": 1, "group": "", "tie": False, "nonfinite": False, "correct": True,
       "correct_full": True, "options": [option(-9.0, 3), option(-8.0, 4)]}]
  summary = summarize("arc_easy", records)
  assert summary["accuracy_raw"] == 0.5 and summary["accuracy_per_char"] == 1.0
