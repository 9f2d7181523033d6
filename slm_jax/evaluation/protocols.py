"""Named evaluation protocols (`evaluate --protocol=paper|spec`): every choice that makes numbers
differ between the paper code and SPEC, set at once, and the list of choices in force.

The protocols are packaged configs of the evaluation's config loader
(`slm_jax/evaluation/configs/`: `paper.py`, `spec.py`; `evaluation.config.LOADER`):
- `spec` (the defaults): SPEC §9/§11 — joint tree scoring, CNT2 scored in the beam where it is a
  target, Hu et al.'s 31 SG suites.
- `paper`: the paper code's choices — terminal-only tree scoring (`tree_eval_type=terminal`),
  CNT2 never scored in the beam, the code's 32 SG suites.
Both: `auto` BLiMP / doc-PPL proposals, the paper's multiple-choice format, float32, bootstrap
seed 2027. A flag given on the command line overrides its protocol value.

`CHOICES` names the flags that are choices (shown by `choices_text` and recorded in
results.json).
"""

from __future__ import annotations

from typing import Any

from slm_jax.evaluation.config import FLAGS, LOADER, EvaluationConfig, key_value

CHOICES = ("protocol", "tree_scoring", "beam_score_cnt2", "sg_suites", "blimp_proposals",
           "docppl_proposals", "proposals", "mc_format", "dtype", "beam", "sub_beam",
           "fast_track", "max_len_factor", "min_len", "gen_beam", "gen_max_tokens",
           "gen_max_words", "bootstrap_resamples", "bootstrap_seed")


def names() -> list[str]:
  """The protocol names (the packaged configs)."""
  return LOADER.names()


def in_force(config: EvaluationConfig) -> dict[str, Any]:
  """The choices of a config, by flag name (`docppl_proposals` None shown as `auto`)."""
  out = {k: key_value(config, FLAGS[k]) for k in CHOICES}
  if out["docppl_proposals"] is None:
    out["docppl_proposals"] = "auto"
  return out


def choices_text(config: EvaluationConfig) -> str:
  """`choices in force (protocol P): key=value, …` for the log."""
  values = in_force(config)
  name = values.pop("protocol", None) or "none (the flags' defaults = spec)"
  return f"choices in force (protocol {name}): " + ", ".join(f"{k}={v}"
                                                              for k, v in values.items())


__all__ = ["CHOICES", "choices_text", "in_force", "names"]
