"""Named evaluation protocols (`evaluate --protocol=paper|spec`): every choice that makes numbers
differ between the paper code and SPEC, set at once, and the list of choices in force.

- `spec` (the flags' defaults): SPEC §9/§11 — joint tree scoring, CNT2 scored in the beam where
  it is a target, Hu et al.'s 31 SG suites.
- `paper`: the paper code's choices — terminal-only tree scoring (`tree_eval_type=terminal`),
  CNT2 never scored in the beam, the code's 32 SG suites.
Both: `auto` BLiMP / doc-PPL proposals, the paper's multiple-choice format, float32, bootstrap
seed 2027. A flag given on the command line overrides its protocol value.

`CHOICES` names the flags that are choices (shown by `choices_text` and recorded in
results.json).
"""

from __future__ import annotations

from typing import Any

COMMON = {"blimp_proposals": "auto", "docppl_proposals": None, "mc_format": "paper",
          "dtype": "float32", "bootstrap_seed": 2027}
PROTOCOLS: dict[str, dict[str, Any]] = {
    "spec": COMMON | {"tree_scoring": "joint", "beam_score_cnt2": True, "sg_suites": "hu31"},
    "paper": COMMON | {"tree_scoring": "terminal", "beam_score_cnt2": False,
                       "sg_suites": "paper32"},
}
CHOICES = ("protocol", "tree_scoring", "beam_score_cnt2", "sg_suites", "blimp_proposals",
           "docppl_proposals", "proposals", "mc_format", "dtype", "beam", "sub_beam",
           "fast_track", "max_len_factor", "min_len", "gen_beam", "gen_max_tokens",
           "gen_max_words", "bootstrap_resamples", "bootstrap_seed")


def in_force(args) -> dict[str, Any]:
  """The choices of a parsed command line (`docppl_proposals` None shown as `auto`)."""
  out = {k: getattr(args, k) for k in CHOICES if hasattr(args, k)}
  if "docppl_proposals" in out and out["docppl_proposals"] is None:
    out["docppl_proposals"] = "auto"
  return out


def choices_text(args) -> str:
  """`choices in force (protocol P): key=value, …` for the log."""
  values = in_force(args)
  name = values.pop("protocol", None) or "none (the flags' defaults = spec)"
  return f"choices in force (protocol {name}): " + ", ".join(f"{k}={v}"
                                                              for k, v in values.items())


__all__ = ["CHOICES", "PROTOCOLS", "choices_text", "in_force"]
