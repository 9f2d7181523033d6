"""`evaluate --protocol=paper|spec` sets every choice at once (explicit flags win) and prints
them; every table says which protocol, format and proposal sources produced it."""

from __future__ import annotations

import dataclasses
from typing import Any

from slm_jax import evaluate
from slm_jax.configurations import CONFIGURATIONS
from slm_jax.downstream import report as downstream_report
from slm_jax.downstream.protocol import protocol
from slm_jax.eval import report
from slm_jax.evaluation import protocols, sources, summary
from slm_jax.inference.beam import SENTENCES_PER_BATCH
from slm_jax.tokenizer import make_tokenizer

COMMON = ["--workdir=w", "--out=o"]


def test_paper_protocol_sets_the_paper_codes_choices_and_flags_win():
  paper = evaluate.parse_args(COMMON + ["--protocol=paper"])
  syntactic = paper.syntactic
  assert (syntactic.tree_scoring, syntactic.beam_score_cnt2, syntactic.sg_suites) == (
      "terminal", False, "paper32")
  assert (syntactic.blimp_proposals, paper.downstream.mc_format, paper.run.dtype) == (
      "auto", "paper", "float32")
  spec = evaluate.parse_args(COMMON + ["--protocol=spec"])
  assert (spec.syntactic.tree_scoring, spec.syntactic.beam_score_cnt2,
          spec.syntactic.sg_suites) == ("joint", True, "hu31")
  mixed = evaluate.parse_args(COMMON + ["--protocol=paper", "--sg-suites=hu31",
                                        "--mc_format=olmes"])
  assert (mixed.syntactic.sg_suites, mixed.downstream.mc_format,
          mixed.syntactic.tree_scoring) == ("hu31", "olmes", "terminal")
  text = protocols.choices_text(paper)
  assert text.startswith("choices in force (protocol paper): tree_scoring=terminal, ")
  for key in ("beam_score_cnt2=False", "sg_suites=paper32", "blimp_proposals=auto",
              "docppl_proposals=auto", "mc_format=paper", "dtype=float32", "bootstrap_seed=2027"):
    assert key in text
  assert "protocol none" in protocols.choices_text(evaluate.parse_args(COMMON))


def test_tables_say_protocol_format_and_proposal_sources():
  args = evaluate.parse_args(COMMON + ["--protocol=paper", "--tasks=blimp,mc"])
  conv = summary.conventions(args)
  assert conv["protocol"] == "paper" and conv["downstream_mc_format"] == "paper"
  results = {"conventions": conv, "models": [
      {"name": "TGTree", "blimp": {"stats": {"proposal_source": {"grammar": 2, "parser": 38,
                                                                  "flat": 0}}},
       "downstream": {"tree_source": "parser"}}]}
  line = report.conventions_line(results, "blimp")
  assert "protocol=paper" in line and "blimp_proposals=auto" in line
  assert "blimp_sources: TGTree: grammar 2, parser 38, flat 0" in line
  mc = downstream_report.conventions_line(results, ["piqa", "boolq"])
  assert "the paper code's format" in mc and "ties go to the first option" in mc
  olmes = dict(results, conventions=dict(conv, downstream_mc_format="olmes"))
  assert "OLMES cloze" in downstream_report.conventions_line(olmes, ["piqa"])


@dataclasses.dataclass
class _Run:
  model: Any
  tokenizer: Any
  configuration: Any


def test_sentences_per_batch_reaches_every_batched_search_and_no_identity():
  """`--sentences_per_batch` goes to the word-synchronous searches (SG, beam proposals) and the
  Pushdown attachment beam; the results do not depend on it, so a result's identity (the SG
  partial-results key: `beam_options`) leaves it out."""
  from tests.test_pushdown_model import tiny_model  # pylint: disable=g-import-not-at-top
  args = evaluate.parse_args(COMMON + ["--sentences_per_batch=3"])
  assert sources.search_options(args.syntactic) == dict(sources.beam_options(args.syntactic),
                                                        sentences_per_batch=3)
  assert "sentences_per_batch" not in sources.beam_options(args.syntactic)
  assert evaluate.parse_args(COMMON).syntactic.sentences_per_batch == SENTENCES_PER_BATCH
  pushdown = CONFIGURATIONS["pushdown"]
  tokenizer = make_tokenizer("word", words=["cats", "sleep"])
  run = _Run(tiny_model(vocab_size=tokenizer.vocab_size), tokenizer, pushdown)
  _, scorer = protocol(pushdown).evaluation_scorer(run, batch_size=4, beam=5,
                                                   sentences_per_batch=args.syntactic.sentences_per_batch)
  assert (scorer.beam, scorer.sentences_per_batch) == (5, 3)
