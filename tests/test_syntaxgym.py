"""SyntaxGym: every formula of the 34 suites parses and evaluates; a hand-made suite with known
surprisals gives the known verdicts; aggregates per circuit / 31 suites / the paper's SG; the
evaluation runs end to end on real suites for terminal and tree models."""

from __future__ import annotations

import csv
import json
import math
import pathlib

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from slm_jax.configurations import CONFIGURATIONS
from slm_jax.eval import sg_aggregate
from slm_jax.eval.syntaxgym import (SuiteError, evaluate_formula, evaluate_syntaxgym, load_suite,
                                    load_suites, parse_formula, tokenize_region)
from slm_jax.inference.scorer import Scorer
from slm_jax.kinds import Kind
from slm_jax.model import Decoder, ModelConfig
from slm_jax.tokenizer import make_tokenizer
from tests.shared_data import require_shared


def values(table: dict):
  return lambda region, condition: table[(region, condition)]


# ---- formulas


def test_every_formula_of_every_suite_parses_and_evaluates():
  root = require_shared("syntaxgym")
  suites = load_suites(root / "json")
  assert len(suites) == 34
  reference = {}
  with open(root / "reference_results" / "syntaxgym_results_gpt-2-pretrained_.csv") as f:
    for row in csv.DictReader(f):
      reference.setdefault(row["suite"], []).append(row)
  rng = np.random.default_rng(0)
  regions = empty = formulas = 0
  for suite in suites:
    assert len(suite.items) == len(reference[suite.name]), suite.name  # nothing lost
    for prediction in suite.predictions:
      formulas += 1
      for item in suite.items:
        draws = {(r, c): float(rng.exponential(5)) for c in item.conditions
                 for r in list(suite.regions) + ["*"]}
        assert isinstance(evaluate_formula(prediction.tree, values(draws)), bool)
    for item in suite.items:
      for contents in item.conditions.values():
        regions += len(contents)
        empty += sum(not tokenize_region(c) for c in contents)
  assert formulas == 36 and regions == 24_040 and empty == 678  # SOURCES.md counts


def test_formula_semantics():
  table = {(1, "a"): 2.0, (2, "a"): 3.0, (1, "b"): 2.0005, (2, "b"): 7.0, ("*", "a"): 5.0}
  check = lambda formula: evaluate_formula(parse_formula(formula), values(table))
  assert check("(1;%a%) + (2;%a%) * 2 = 8")  # * before +
  assert check("[(1;%a%) + (2;%a%)] * 2 = 10")  # [ ] group
  assert check("(1;%a%) = (1;%b%)")  # |Δ| = 5e-4 <= 1e-3 + 1e-5·|b|
  assert not check("(1;%a%) < (1;%b%) - 0.001")
  assert check("-(1;%a%) < 0 & -[(2;%b%) - (2;%a%)] = -4")
  assert check("(2;%b%) < 0 | (2;%b%) > (2;%a%)")
  # & and | have equal precedence, left to right (the official syntaxgym grammar):
  # A | B & C is (A | B) & C, which is false here although A | (B & C) holds.
  assert not check("(2;%b%) > 0 | (2;%b%) < (2;%a%) & (1;%a%) = 3")
  assert check("(2;%b%) > 0 | (2;%b%) < (2;%a%) & (1;%a%) = 2")
  assert check("(1;%a%) = 3 & (2;%b%) < 0 | (2;%b%) > 0")  # (A & B) | C
  assert check("(*;%a%) = (1;%a%) + (2;%a%)")
  assert check("( 2 ; %b% ) / (1;%a%) > 3.4")
  for bad, why in (("(1;%a%) >", "unexpected"), ("(1;%a%) + 1", "not a comparison"),
                   ("[(1;%a%) > 1", "missing"), ("(1;%a%) > 1 ]", "unexpected"),
                   ("(1;%a%) > $", "cannot read")):
    with pytest.raises(SuiteError, match=why):
      parse_formula(bad)


def test_ptb_style_region_tokens():
  assert tokenize_region("") == []
  assert tokenize_region("the company's plan") == ["the", "company", "'s", "plan"]
  assert tokenize_region(", the teacher considered it poorly written .") == [
      ",", "the", "teacher", "considered", "it", "poorly", "written", "."]
  assert tokenize_region("it isn't over.") == ["it", "is", "n't", "over", "."]
  assert tokenize_region('he said "no"') == ["he", "said", "``", "no", "''"]


# ---- a hand-made suite with known surprisals


def write_suite(folder: pathlib.Path, name: str, items, predictions) -> None:
  folder.mkdir(parents=True, exist_ok=True)
  suite = {
      "meta": {"name": name, "metric": "sum"},
      "region_meta": {"1": "subject", "2": "verb", "3": "rest"},
      "predictions": [{"type": "formula", "formula": p} for p in predictions],
      "items": [{"item_number": i + 1, "conditions": [
          {"condition_name": c, "regions": [{"region_number": r + 1, "content": text}
                                            for r, text in enumerate(regions)]}
          for c, regions in conditions.items()]} for i, conditions in enumerate(items)],
  }
  (folder / f"{name}.json").write_text(json.dumps(suite))


# word log-probabilities (nats) given the previous word: context matters on purpose
LOGP = {"plays": -2.0, "play": -5.0, "sings": -6.0, "sing": -1.0, "the": -1.0, "woman": -3.0,
        "women": -3.0, "guitar": -4.0, ".": -0.5}


def toy_prefix(sentences):
  """log p̃(x≤w): context-free word scores, except that words after 'the' cost 1 nat less."""
  out = []
  for words in sentences:
    lp = [LOGP[w] + (1.0 if i and words[i - 1] == "the" else 0.0) for i, w in enumerate(words)]
    out.append(np.cumsum(lp))
  return out


ITEMS = [
    {"match": ["the woman", "plays", "the guitar ."],
     "mismatch": ["the woman", "play", "the guitar ."]},  # right: play is more surprising
    {"match": ["the women", "sings", "the guitar ."],
     "mismatch": ["the women", "sing", "the guitar ."]},  # wrong way round
    {"match": ["the woman", "", "the guitar ."],
     "mismatch": ["the woman", "", "the guitar ."]},  # empty verb region: 0 > 0 fails
]
PREDICTIONS = ["(2;%mismatch%) > (2;%match%)",
               "[(3;%match%) = (3;%mismatch%)] & (*;%mismatch%) >= (*;%match%)"]


def test_hand_made_suite_gives_the_known_verdicts(tmp_path):
  write_suite(tmp_path / "json", "number_toy", ITEMS, PREDICTIONS)
  result = evaluate_syntaxgym(toy_prefix, tmp_path / "json")
  suite = result["suites"]["number_toy"]
  bits = lambda nats: -nats / math.log(2)
  first = suite["surprisals"][0]
  assert first["match"] == pytest.approx([bits(-1 - 2), bits(-2), bits(-1 - 3 - 0.5)], abs=1e-4)
  assert first["mismatch"][1] == pytest.approx(bits(-5), abs=1e-4)
  assert suite["surprisals"][2]["match"][1] == 0.0  # empty region
  assert suite["item_correct"] == [True, False, False]
  assert [p["accuracy"] for p in suite["predictions"]] == pytest.approx([1 / 3, 2 / 3])
  assert [p["correct"] for p in suite["predictions"]] == [1, 2]
  assert suite["accuracy"] == pytest.approx(1 / 3) and suite["correct"] == 1
  assert suite["item_rule"] == "first prediction" and suite["all_predictions_correct"] == 1
  assert suite["empty_regions"] == 2 and suite["failed_items"] == 0
  assert suite["circuit"] == "Agreement"


def test_an_item_is_correct_when_its_first_prediction_holds(tmp_path):
  """fgd_hierarchy-like: the first prediction holds, the second (an equality of two surprisals
  in different contexts) fails; the item is correct and the second prediction is reported on its
  own (SPEC §9). Requiring every prediction would score the item wrong."""
  item = {"match": ["the woman", "plays", "the guitar ."],
          "mismatch": ["the woman", "play", "the woman ."]}  # region 3 differs: `=` fails
  write_suite(tmp_path / "json", "fgd_toy", [item], PREDICTIONS)
  result = evaluate_syntaxgym(toy_prefix, tmp_path / "json")
  suite = result["suites"]["fgd_toy"]
  assert suite["item_correct"] == [True] and suite["accuracy"] == 1.0
  assert [p["correct"] for p in suite["predictions"]] == [1, 0]
  assert suite["all_predictions_correct"] == 0
  assert result["counts"]["items_failing_a_later_prediction"] == 1
  assert result["circuits"]["Long-Distance Dependencies"] == 1.0


def test_aggregates_headline_suite_mean_and_suite_sets(tmp_path):
  folder = tmp_path / "json"
  write_suite(folder, "number_toy", ITEMS, PREDICTIONS[:1])  # 1/3
  write_suite(folder, "npi_toy", ITEMS[:2], PREDICTIONS[:1])  # 1/2
  write_suite(folder, "fgd-embed3", ITEMS[:1], PREDICTIONS[:1])  # 1/1, not in Hu et al.'s 31
  write_suite(folder, "fgd_toy", ITEMS[1:], PREDICTIONS[:1])  # 0/2
  write_suite(folder, "nn-nv-rpl", ITEMS[:1], PREDICTIONS[:1])  # in neither set
  circuits = {"circuit_tags": {"Agreement": ["number"], "Licensing": ["npi"],
                               "Long-Distance Dependencies": ["fgd"]}}
  (tmp_path / "circuits.json").write_text(json.dumps(circuits))
  result = evaluate_syntaxgym(toy_prefix, folder)  # default: hu31
  assert sorted(result["suites"]) == ["fgd_toy", "npi_toy", "number_toy"]
  assert result["suite_set"] == "hu31" and result["item_rule"] == "first prediction"
  assert result["circuits"] == pytest.approx({"Agreement": 1 / 3, "Licensing": 1 / 2,
                                              "Long-Distance Dependencies": 0.0})
  assert result["sg"] == pytest.approx(np.mean([1 / 3, 1 / 2, 0.0]))  # mean of the circuits
  assert result["suite_mean"] == pytest.approx(np.mean([1 / 3, 1 / 2, 0.0]))
  assert result["suite_count"] == 3 and result["counts"]["items"] == 3 + 2 + 2
  paper = evaluate_syntaxgym(toy_prefix, folder, suites="paper32")  # keeps fgd-embed3
  assert "fgd-embed3" in paper["suites"] and "nn-nv-rpl" not in paper["suites"]
  ldd = paper["circuits"]["Long-Distance Dependencies"]
  assert ldd == pytest.approx(1 / 3)  # pooled over items: (1 + 0) / (1 + 2), not (1 + 0) / 2
  assert paper["circuits_by_suite"]["Long-Distance Dependencies"] == pytest.approx(0.5)
  assert paper["sg"] == pytest.approx(np.mean([1 / 3, 1 / 2, 1 / 3]))
  assert paper["suite_mean"] == pytest.approx(np.mean([1 / 3, 1 / 2, 1.0, 0.0]))
  json.dumps(result)  # JSON-ready
  only = evaluate_syntaxgym(toy_prefix, folder, suites=["npi_toy"], max_items=1)
  assert list(only["suites"]) == ["npi_toy"] and only["suites"]["npi_toy"]["items"] == 1
  assert only["sg"] is None  # a headline needs every circuit
  with pytest.raises(FileNotFoundError, match="nope"):
    evaluate_syntaxgym(toy_prefix, folder, suites=["nope"])


def test_the_headline_is_the_mean_of_six_pooled_circuits():
  """Synthetic verdicts with the paper's circuit sizes (Table 14 denominators: 57, 56, 152, 92,
  266 and 176 + 42 for fgd-embed3/4 in paper32)."""
  rng = np.random.default_rng(3)
  sizes = {"number_a": 19, "number_b": 38, "center_a": 56, "npz_a": 100, "mvrr_a": 52,
           "subordination_a": 92, "npi_a": 200, "reflexive_a": 66, "fgd_a": 176, "cleft_a": 42}
  verdicts = {s: rng.random(n) < 0.8 for s, n in sizes.items()}
  result = sg_aggregate.aggregate(verdicts)
  pooled = lambda *names: (sum(verdicts[n].sum() for n in names)
                           / sum(len(verdicts[n]) for n in names))
  expected = [pooled("number_a", "number_b"), pooled("center_a"), pooled("npz_a", "mvrr_a"),
              pooled("subordination_a"), pooled("npi_a", "reflexive_a"),
              pooled("fgd_a", "cleft_a")]
  assert result["sg"] == pytest.approx(np.mean(expected))
  assert result["circuit_items"]["Agreement"] == 57
  assert result["suite_mean"] == pytest.approx(np.mean([v.mean() for v in verdicts.values()]))


def test_bad_suites_are_named(tmp_path):
  write_suite(tmp_path, "broken", ITEMS[:1], ["(4;%match%) > 0"])
  with pytest.raises(SuiteError, match="broken.json.*region 4"):
    load_suite(tmp_path / "broken.json")
  write_suite(tmp_path, "broken", ITEMS[:1], ["(1;%other%) > 0"])
  with pytest.raises(SuiteError, match="condition 'other'"):
    load_suite(tmp_path / "broken.json")
  # BAD 11: a suite without "items" (or with none) is refused, not dropped from the headline
  write_suite(tmp_path, "no_items", ITEMS[:1], ["(1;%match%) > 0"])
  data = json.loads((tmp_path / "no_items.json").read_text())
  for items in (None, []):
    if items is None:
      data.pop("items")
    else:
      data["items"] = items
    (tmp_path / "no_items.json").write_text(json.dumps(data))
    with pytest.raises(SuiteError, match=r"no_items.json: (not a SyntaxGym suite \(KeyError"
                       r"\('items'\)|a SyntaxGym suite without items)"):
      load_suite(tmp_path / "no_items.json")


# ---- real suites, real (random) models


def model_scorer(name: str, words) -> Scorer:
  configuration = CONFIGURATIONS[name]
  tokenizer = make_tokenizer("word", words=words)
  config = ModelConfig(vocab_size=tokenizer.vocab_size, d_model=16, n_layers=1, n_heads=2,
                       compute_dtype=jnp.float32, init_std=0.3, attention=configuration.attention)
  return Scorer(Decoder(config, rngs=nnx.Rngs(0)), tokenizer, configuration)


def test_end_to_end_on_real_suites():
  root = require_shared("syntaxgym")
  suite = load_suite(root / "json" / "number_src.json")
  words = [w for c in suite.items[0].conditions.values() for r in c for w in tokenize_region(r)]
  terminal = model_scorer("pause1", [w for w in words if w != words[-2]])
  result = evaluate_syntaxgym(terminal, root / "json", suites=["number_src"], max_items=1)
  record = result["suites"]["number_src"]
  assert record["items"] == 1 and record["failed_items"] == 0
  assert record["unknown_words"] >= 1  # one word is not in the toy vocabulary
  manual = lambda sentences: [np.cumsum(w) for w in terminal.terminal_word_logprobs(sentences)]
  same = evaluate_syntaxgym(manual, root / "json", suites=["number_src"], max_items=1)
  assert same["suites"]["number_src"]["surprisals"] == record["surprisals"]
  tree = model_scorer("tgtree", words)
  result = evaluate_syntaxgym(tree, root / "json", suites=["number_src"], max_items=1, beam=4,
                              fast_track=1)
  record = result["suites"]["number_src"]
  surprisals = np.concatenate([np.asarray(v) for v in record["surprisals"][0].values()])
  assert record["failed_items"] == 0 and (surprisals > 0).all()


def test_tree_shuffle_is_scored_on_terminals_only():
  """Tree-Shuffle reads SG sentences in lin0 (SPEC §9): its prefix log-probabilities are its
  terminal-format word log-probabilities, no beam; `tree_scoring` does not apply to it."""
  from slm_jax.eval.syntaxgym import prefix_logprob_fn
  scorer = model_scorer("tree_shuffle", ["the", "cat", "sleeps", "."])
  sentences = [["the", "cat", "sleeps", "."], ["the", "cat", "."]]
  got = prefix_logprob_fn(scorer, tree_scoring="terminal")(sentences)
  lin0 = scorer.terminal_sequence([sentences[0]])
  assert scorer.terminal_scheme == "lin0" and (lin0.kinds[1:-1] == Kind.TERMINAL).all()
  words = scorer.terminal_word_logprobs(sentences)
  for g, w in zip(got, words):
    np.testing.assert_allclose(g, np.cumsum(w))
  with pytest.raises(ValueError, match="tree_scoring"):
    prefix_logprob_fn(scorer, tree_scoring="full")


def test_progress_is_reported_after_each_suite(tmp_path):
  folder = tmp_path / "json"
  write_suite(folder, "number_toy", ITEMS, PREDICTIONS[:1])
  write_suite(folder, "npi_toy", ITEMS[:2], PREDICTIONS[:1])
  calls = []
  evaluate_syntaxgym(toy_prefix, folder, suites=["number_toy", "npi_toy"],
                     progress=lambda done, total: calls.append((done, total)))
  assert calls == [(0, 2), (1, 2), (2, 2)]
