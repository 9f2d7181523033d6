"""The 12 SLM configurations and the pause controls (SPEC §5): linearization × attention.

One table; configs, `explain`, the data pipeline and the evaluators look names up here, and
`check_combination` is the single rule for which (linearization, attention) pairs are valid.
"""

from __future__ import annotations

import dataclasses

from slm_jax.linearize import SCHEMES
from slm_jax.structure import AttentionSpec, parse_attention


@dataclasses.dataclass(frozen=True)
class Configuration:
  name: str
  linearization: str
  attention: AttentionSpec


_TABLE = (  # name, linearization, attention (SPEC §5 order)
    ("terminal", "lin0", "causal"),
    ("tree", "lin1", "causal"),
    ("tgtree", "lin2", "causal"),
    ("tg", "lin2", "tg"),
    ("tgnomask", "lin2", "tg_nomask"),
    ("tgnomask_aug", "lin2", "tg_nomask_aug"),
    ("tree_noont", "lin1_noont", "causal"),
    ("tree_compress", "lin1_merge", "causal"),
    ("tree_triplecnt", "lin3", "causal"),
    ("tree_shuffle", "lin1_shuf", "causal"),
    ("tgnomask_mix_tg", "lin2", "mix(tg_nomask,tg)"),
    ("tgtree_mix_tg", "lin2", "mix(causal,tg)"),
    ("pause1", "pause1", "causal"),
    ("pause2", "pause2", "causal"),
)

CONFIGURATIONS = {name: Configuration(name, lin, parse_attention(att)) for name, lin, att in _TABLE}
# Every attention of the table, in table order: the four types, then the two hybrids.
ATTENTIONS = tuple(dict.fromkeys(att for _, _, att in _TABLE))


def check_combination(linearization: str, attention: AttentionSpec) -> None:
  """Raises ValueError for a pair no model can train on (e.g. a TG mask over lin1).

  TG-family masks need lin2: COMPOSE happens at CNT1 and the stack hides CNT2, which only lin2
  marks. Every linearization works with causal attention.
  """
  if linearization not in SCHEMES:
    raise ValueError(f"unknown linearization {linearization!r}; expected one of "
                     f"{', '.join(SCHEMES)}")
  if attention.is_structural and linearization != "lin2":
    raise ValueError(f"attention {attention.name} needs linearization lin2 (it composes at CNT1 "
                     f"and hides CNT2), but linearization is {linearization}")


def get_configuration(name: str) -> Configuration:
  try:
    return CONFIGURATIONS[name]
  except KeyError:
    raise ValueError(f"unknown configuration {name!r}; expected one of "
                     f"{', '.join(CONFIGURATIONS)}") from None


def resolve(configuration: str | None = None, linearization: str | None = None,
            attention: str | None = None) -> Configuration:
  """A validated Configuration from a name, or from explicit linearization/attention."""
  if configuration:
    if linearization or attention:
      raise ValueError("give either a configuration name or linearization/attention, not both")
    return get_configuration(configuration)
  lin = linearization or "lin1"
  spec = parse_attention(attention or "causal")
  check_combination(lin, spec)
  named = [c.name for c in CONFIGURATIONS.values() if c.linearization == lin and c.attention == spec]
  return Configuration(named[0] if named else f"{lin}+{spec.name}", lin, spec)
