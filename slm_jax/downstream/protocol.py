"""What a run is scored and searched with: the one dispatch point of every evaluation.

`protocol(configuration)` picks the run's protocol; the evaluator (`slm_jax.evaluation`: SG,
BLiMP, doc-PPL) and `downstream.run` (MC, BoolQ, XSum) ask it and nothing else. A protocol gives
- `evaluation_scorer(run, batch_size=…, beam=…)`: (the run as it is scored, its scorer) for SG,
  BLiMP and doc-PPL;
- `scorer(run, batch_size)`: the teacher-forced scorer of the multiple-choice tasks and BoolQ;
- `generated_positions(…)` / `generate(run, ids, kinds, …)`: the XSum summary search;
  `generate_many(run, prompts, …)` the same for several prompts (tree schemes and the Pushdown
  reference search them together, `inference.generate_batch` / `pushdown.generate_batch`: the same
  summaries as one at a time).

- **SLM configurations** (`Protocol`): `inference.scorer.Scorer` over the run's own linearization
  (every task scored) and `inference.generate.generate` for XSum (`beam_generate` for terminal
  formats, word-synchronous search for tree schemes).
- **The Pushdown reference** (`configuration.reference == "pushdown"`, SPEC §14;
  `PushdownProtocol`): SG, BLiMP and doc-PPL score it as a terminal model
  (`pushdown.scoring.scoring_configuration`: lin0) through `PushdownScorer`, the attachments
  marginalized by a beam (`--beam`); MC and BoolQ through `PushdownTeacherScorer` — teacher-forced
  on its terminal row with the tree source's spans supplied as its stack tape, terminals and EOS
  scored, the structure given; XSum through `pushdown.generate.joint_generate`: summary
  pieces and attachment actions searched jointly (beam 6, ≤ 150 tokens; the summary is terminals
  only, so `max_tokens` is its whole length after the prompt).
- **A pretrained checkpoint** (`reference == CHECKPOINT`, `evaluate --checkpoint`, SPEC §13;
  `RawTextProtocol`): SG, BLiMP, doc-PPL and the multiple-choice tasks score the text as written
  with the checkpoint's own tokenizer and BOS (`eval.raw_text.RawTextScorer`; MC prompts:
  `downstream.raw_text_prompts`); XSum and BoolQ (fine-tuned runs) are not scored for it.

MC, BoolQ and XSum read the run's own configuration (lin1 for Pushdown), so
`encoding.TextEncoder` parses every component with the tree source for either.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from slm_jax.configurations import Configuration
from slm_jax.eval.raw_text import RawTextScorer
from slm_jax.inference.beam import SENTENCES_PER_BATCH
from slm_jax.inference.generate import Generation, generate, generated_positions
from slm_jax.inference.generate_batch import CONCURRENT, word_synchronous_generate_many
from slm_jax.inference.scorer import Scorer
from slm_jax.pushdown.generate import joint_generate
from slm_jax.pushdown.generate_batch import joint_generate_many
from slm_jax.pushdown.scoring import PushdownScorer, PushdownTeacherScorer, scoring_configuration


class Protocol:
  """The SLM configurations' scorer and search (module docstring)."""

  name = "slm"
  note = ""  # how the protocol differs, for the report ("" = the paper's)

  def evaluation_scorer(self, run: Any, *, batch_size: int, beam: int,
                        sentences_per_batch: int = SENTENCES_PER_BATCH) -> tuple[Any, Scorer]:
    """(the run as SG, BLiMP and doc-PPL score it, its scorer): the run's own, teacher-forced
    (`beam` and `sentences_per_batch` are the Pushdown reference's attachment beam's)."""
    del beam, sentences_per_batch
    return run, self.scorer(run, batch_size)

  def scorer(self, run: Any, batch_size: int) -> Scorer:
    """The teacher-forced scorer of a loaded run (`.model`, `.tokenizer`, `.configuration`)."""
    return Scorer(run.model, run.tokenizer, run.configuration, batch_size=batch_size)

  def generated_positions(self, configuration: Configuration, *, max_tokens: int,
                          max_words: int) -> int:
    """Positions a summary may fill after the prompt (the room the prompt leaves for it): at most
    `max_tokens` for every model, structure included for tree models, which also stop at
    `max_words` words (the paper code: 150 tokens, 75 words; SPEC §11)."""
    return generated_positions(configuration, max_tokens=max_tokens, max_words=max_words,
                               tree_max_tokens=max_tokens)

  def generate(self, run: Any, ids, kinds, *, beam: int, max_tokens: int, max_words: int,
               max_open: int | None) -> Generation:
    """The summary of one encoded prompt (ids, kinds in the run's linearization)."""
    limits = ({"max_words": max_words, "max_open": max_open, "max_tokens": max_tokens}
              if run.configuration.scheme.has_brackets else {"max_tokens": max_tokens})
    return generate(run.model, run.tokenizer, run.configuration, ids, prompt_kinds=kinds,
                    beam=beam, **limits)

  def generate_many(self, run: Any, prompts, *, concurrent: int = CONCURRENT,
                    **options) -> list[Generation]:
    """The summaries of several encoded prompts [(ids, kinds)] (`generate`'s options): tree
    schemes' word-synchronous searches run together, `concurrent` at a time (`generate_batch`),
    others one by one."""
    if run.configuration.scheme.has_brackets:
      return word_synchronous_generate_many(
          run.model, run.tokenizer, run.configuration, [ids for ids, _ in prompts],
          prompt_kinds=[kinds for _, kinds in prompts], beam=options["beam"],
          max_words=options["max_words"], max_open=options["max_open"],
          max_tokens=options["max_tokens"], concurrent=concurrent)
    return [self.generate(run, ids, kinds, **options) for ids, kinds in prompts]


class PushdownProtocol(Protocol):
  """The Pushdown reference's scorer and joint search (module docstring)."""

  name = "pushdown"
  note = ("the architectural reference (SPEC §14), its own protocol: multiple choice and BoolQ "
          "scored teacher-forced on its terminals with the tree source's spans supplied as its "
          "stack tape (structure given, not scored: S_full = S_term); XSum generated by a joint "
          "beam over summary tokens and attachment actions")

  def evaluation_scorer(self, run: Any, *, batch_size: int, beam: int,
                        sentences_per_batch: int = SENTENCES_PER_BATCH) -> tuple[Any, Scorer]:
    """Scored as words (lin0), the attachment beam of width `beam` marginalizing the structure
    (`sentences_per_batch` sentences' beams advanced together)."""
    run = dataclasses.replace(run, configuration=scoring_configuration(run.configuration))
    return run, PushdownScorer(run.model, run.tokenizer, run.configuration, beam=beam,
                               batch_size=batch_size, sentences_per_batch=sentences_per_batch)

  def scorer(self, run: Any, batch_size: int) -> Scorer:
    return PushdownTeacherScorer(run.model, run.tokenizer, run.configuration,
                                 batch_size=batch_size)

  def generated_positions(self, configuration: Configuration, *, max_tokens: int,
                          max_words: int) -> int:
    del configuration, max_words  # the summary is terminal pieces only
    return max_tokens

  def generate(self, run: Any, ids, kinds, *, beam: int, max_tokens: int, max_words: int,
               max_open: int | None) -> Generation:
    del max_words, max_open  # no brackets are generated: the attachments carry the structure
    return joint_generate(run.model, run.tokenizer, ids, prompt_kinds=kinds, beam=beam,
                          max_tokens=max_tokens)

  def generate_many(self, run: Any, prompts, *, beam: int, max_tokens: int, max_words: int,
                    max_open: int | None, concurrent: int = CONCURRENT) -> list[Generation]:
    """`generate` of each prompt, the joint searches of `concurrent` articles run together
    (`pushdown.generate_batch`: the same summaries as one at a time)."""
    del max_words, max_open
    return joint_generate_many(run.model, run.tokenizer, [ids for ids, _ in prompts],
                               prompt_kinds=[kinds for _, kinds in prompts], beam=beam,
                               max_tokens=max_tokens, concurrent=concurrent)


CHECKPOINT = "checkpoint"  # `Configuration.reference` of a pretrained checkpoint (raw text)


class RawTextProtocol(Protocol):
  """A pretrained checkpoint: raw text, its own tokenizer and BOS (module docstring)."""

  name = "raw text"
  note = ("a pretrained checkpoint scored as raw text (SPEC §13): the sentence as written, its "
          "own tokenizer, its BOS (else EOS) as the one unscored prefix token, then one space "
          "(lm-eval's target delimiter), no added tokens; "
          "SyntaxGym regions joined by spaces, a token in the region of its last character")

  def evaluation_scorer(self, run: Any, *, batch_size: int, beam: int,
                        sentences_per_batch: int = SENTENCES_PER_BATCH) -> tuple[Any, Any]:
    del beam, sentences_per_batch
    return run, RawTextScorer(run.model, run.tokenizer, batch_size=batch_size)

  def scorer(self, run: Any, batch_size: int) -> RawTextScorer:
    """The multiple-choice options as raw text (`downstream.raw_text_prompts`)."""
    return RawTextScorer(run.model, run.tokenizer, batch_size=batch_size,
                         configuration=run.configuration)


PROTOCOLS = {"": Protocol(), "pushdown": PushdownProtocol(),  # by `Configuration.reference`
             CHECKPOINT: RawTextProtocol()}


def protocol(configuration: Configuration) -> Protocol:
  """The protocol of a run's configuration."""
  try:
    return PROTOCOLS[configuration.reference]
  except KeyError:
    known = ", ".join(k for k in PROTOCOLS if k)
    raise ValueError(f"{configuration.name}: no downstream protocol for reference model "
                     f"{configuration.reference!r} (known: {known})") from None


def protocol_note(name: str) -> str:
  """The report's note for a protocol recorded in results ("" for the paper's, or unknown)."""
  found = [p for p in PROTOCOLS.values() if p.name == name]
  return found[0].note if found else ""
