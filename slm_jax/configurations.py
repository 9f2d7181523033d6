"""The 12 SLM configurations, the pause controls (SPEC §5) and the Pushdown reference (SPEC §14).

One table; configs, `explain`, the data pipeline and the evaluators look names up here, and
`check_combination` is the single rule for which (linearization, attention) pairs are valid.
"""

from __future__ import annotations

import dataclasses

from slm_jax.linearize import Scheme, get_scheme
from slm_jax.sections import Rules
from slm_jax.structure import AttentionSpec, parse_attention


@dataclasses.dataclass(frozen=True)
class Configuration:
  name: str
  linearization: str
  attention: AttentionSpec
  # "" for the SLM decoders; "pushdown": the architectural reference of SPEC §14
  # (`slm_jax.pushdown`), trained on the lin1 rows' silver structure with terminal-only input.
  reference: str = ""

  @property
  def scheme(self) -> Scheme:
    """The linearization's facts (the scheme table)."""
    return get_scheme(self.linearization)


_TABLE = (  # name, linearization, attention (SPEC §5 order)[, reference model (SPEC §14)]
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
    ("pushdown", "lin1", "causal", "pushdown"),  # SPEC §14: reads lin1 rows, models terminals
)

CONFIGURATIONS = {row[0]: Configuration(row[0], row[1], parse_attention(row[2]), *row[3:])
                  for row in _TABLE}
# Every attention of the table, in table order: the four types, then the two hybrids.
ATTENTIONS = tuple(dict.fromkeys(row[2] for row in _TABLE))


def check_combination(linearization: str, attention: AttentionSpec) -> None:
  """Raises ValueError for a pair no model can train on (e.g. a TG mask over lin1).

  TG-family masks need lin2: COMPOSE happens at CNT1 and the stack hides CNT2, which only lin2
  marks. Every linearization works with causal attention.
  """
  if attention.tg_family and not get_scheme(linearization).tg_masks:
    raise ValueError(f"attention {attention.name} needs linearization lin2 (it composes at CNT1 "
                     f"and hides CNT2), but linearization is {linearization}")


@dataclasses.dataclass(frozen=True)
class ConfigurationSection:
  """The `configuration` section of a run's config: a SPEC §5 name, or a custom name outside the
  table, with its linearization and attention (the rules of the pair live here)."""

  name: str
  linearization: str
  attention: str

  def __post_init__(self):
    rules = Rules("configuration", self)
    if rules.typed:
      rules.need(bool(self.name), "name is empty")
      try:
        spec = parse_attention(self.attention)
        check_combination(self.linearization, spec)
      except ValueError as error:
        rules.need(False, f"configuration: {error}")
      else:
        table = CONFIGURATIONS.get(self.name)
        if table is not None and (table.linearization, table.attention) != (self.linearization,
                                                                            spec):
          same = [c.name for c in CONFIGURATIONS.values()
                  if c.linearization == self.linearization and c.attention == spec]
          hint = (f"set configuration.name={same[0]}" if same else
                  "give the run a name outside the table (e.g. configuration.name=custom)")
          rules.need(False, f"name={self.name} means {table.linearization} + "
                     f"{table.attention.name}, but linearization/attention are "
                     f"{self.linearization} + {spec.name}; {hint}")
    rules.done()

  def resolve(self) -> Configuration:
    """The validated `Configuration` under this section's name (a table name keeps its
    reference model)."""
    table = CONFIGURATIONS.get(self.name)
    return Configuration(self.name, self.linearization, parse_attention(self.attention),
                         table.reference if table is not None else "")


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
  named = [c.name for c in CONFIGURATIONS.values()
           if c.linearization == lin and c.attention == spec and not c.reference]
  return Configuration(named[0] if named else f"{lin}+{spec.name}", lin, spec)
