"""Where an evaluation's trees come from: the proposal sources its config chooses (SPEC §9).

- `blimp_source(arg, k, seed)` (`--blimp_proposals`) and `docppl_data(config, first_cfg)`
  (`--docppl_ptb`, `--docppl_proposals`: the documents and their source): `auto` (the default,
  SPEC §9: the embedded grammar's exact posterior where the grammar parses the sentence, else K
  samples of the shipped parser, else a flat tree; `auto_source`), `grammar` (the embedded
  grammar's posterior, a flat tree where it has none), `flat`, `gold` (doc-PPL's PTB trees:
  `eval.proposals.GoldProposals`), `parser[:DIR]` (`parser_source`: K samples of slm_jax's own
  parser), a K-best FILE, or `beam`: None here, built per run by `beam_source` from the run's own
  word-synchronous beam search (`beam_options`: the `BeamSearcher` options of the config's
  `syntactic` section).
- `source_stats(source)`: a source's counters (a fallback's merged with its primary's; a chain's
  per-source sentence counts), so the evaluator can report how many sentences took each source.
"""

from __future__ import annotations

from typing import Any

from slm_jax.eval.grammar_posterior import GrammarPosterior
from slm_jax.eval.proposals import (BeamProposals, ChainProposals, FallbackProposals,
                                    FileProposals, FlatProposals, GoldProposals, ProposalSource)
from slm_jax.evaluation.config import EvaluationConfig, SyntacticSection
from slm_jax.trees import Tree


def beam_options(syntactic: SyntacticSection) -> dict[str, Any]:
  """The `BeamSearcher` options of the config's syntactic section (SG and beam proposals)."""
  return dict(beam=syntactic.sub_beam or syntactic.beam, word_beam=syntactic.beam,
              fast_track=syntactic.fast_track, max_len_factor=syntactic.max_len_factor,
              min_len=syntactic.min_len, score_cnt2=syntactic.beam_score_cnt2)


def search_options(syntactic: SyntacticSection) -> dict[str, Any]:
  """`beam_options` and how many sentences a batched search advances together (a speed and
  memory setting: the results do not depend on it, so it is not part of a result's identity)."""
  return dict(beam_options(syntactic), sentences_per_batch=syntactic.sentences_per_batch)


def blimp_source(arg: str, k: int, seed: int) -> ProposalSource | None:
  """The BLiMP source shared by all runs; None for `beam` (built per run by `beam_source`)."""
  if arg == "beam":
    return None
  if arg == "flat":
    return FlatProposals()
  if arg == "auto":
    return auto_source(k, seed)
  if arg == "grammar":
    return FallbackProposals(GrammarPosterior(k=k, seed=seed), FlatProposals())
  if is_parser(arg):
    return parser_source(arg, k, seed)
  return FileProposals(arg, k=k)


def is_parser(arg: str | None) -> bool:
  return arg is not None and (arg == "parser" or arg.startswith("parser:"))


def parser_source(arg: str, k: int, seed: int) -> ProposalSource:
  """`parser` (the shipped GUM model) or `parser:DIR`: K distinct CRF samples of slm_jax's own
  parser per sentence; a sentence it cannot take (too long) falls back to a flat tree, counted."""
  from slm_jax.eval.parser_proposals import ParserProposals  # pylint: disable=g-import-not-at-top
  path = arg.partition(":")[2] or None
  return FallbackProposals(ParserProposals(path, k=k, seed=seed), FlatProposals())


def auto_source(k: int, seed: int, parser_path: str | None = None) -> ChainProposals:
  """SPEC §9's default: the embedded grammar's exact posterior for a sentence it parses, else K
  distinct samples of the shipped parser (or `parser_path`), else (empty or longer than the
  parser's limit) a flat tree; `stats` counts the sentences of each (`grammar`, `parser`,
  `flat`). The parser is loaded on first use: a run whose sentences the grammar covers never
  loads it."""
  return ChainProposals([("grammar", GrammarPosterior(k=k, seed=seed)),
                         ("parser", _LazyParser(parser_path, k, seed)),
                         ("flat", FlatProposals())])


class _LazyParser(ProposalSource):
  """`ParserProposals(path, k, seed)`, loaded when first asked for a tree."""

  def __init__(self, path: str | None, k: int, seed: int):
    self.args = (path, k, seed)
    self._source: ProposalSource | None = None

  def _get(self) -> ProposalSource:
    if self._source is None:
      from slm_jax.eval import parser_proposals  # pylint: disable=g-import-not-at-top
      path, k, seed = self.args
      self._source = parser_proposals.ParserProposals(path, k=k, seed=seed)
    return self._source

  def prefetch(self, sentences) -> None:
    sentences = list(sentences)
    if sentences:
      self._get().prefetch(sentences)

  def proposals(self, sentence_words):
    return self._get().proposals(sentence_words)


def docppl_data(config: EvaluationConfig, first_cfg
                ) -> tuple[list[list[Tree]], ProposalSource | None, dict]:
  """(documents, their proposal source — None for `beam` —, what to record in the settings) of
  doc-PPL: the `--docppl_ptb` files or the embedded test split of the first run's seed (the
  default seed, 0, when only `--checkpoint`s are evaluated: `first_cfg` None)."""
  syntactic, k, seed = config.syntactic, config.syntactic.proposals, config.run.seed
  limit = syntactic.docppl_documents or config.run.max_items or 500
  if syntactic.docppl_ptb:
    from slm_jax.ptb import read_documents
    documents = read_documents(syntactic.docppl_ptb)[:limit]
    source_kind = syntactic.docppl_proposals or "auto"
    info = {"corpus": "PTB " + " ".join(str(p) for p in syntactic.docppl_ptb)}
  else:
    from slm_jax.corpus.treebank import embedded_corpus
    seed = int(first_cfg.data.embedded_seed) if first_cfg is not None else 0
    documents = embedded_corpus("test", limit, seed)
    source_kind = syntactic.docppl_proposals or "auto"
    info = {"corpus": f"embedded test split (seed {seed})"}
  if source_kind == "beam":
    source: ProposalSource | None = None  # per run: `_beam_source`
  elif source_kind == "gold":
    source = GoldProposals(documents)
  elif source_kind == "auto":
    source = auto_source(k, seed)
  elif source_kind == "grammar":
    source = FallbackProposals(GrammarPosterior(k=k, seed=seed), FlatProposals())
  elif is_parser(source_kind):
    source = parser_source(source_kind, k, seed)
  else:
    source = FileProposals(source_kind, k=k)
  info.update(documents=len(documents), proposals=source_kind)
  return documents, source, info


def beam_source(run, scorer, syntactic: SyntacticSection) -> ProposalSource | None:
  """This run's beam proposals (flat tree where the beam completes nothing); None for terminal
  models, which need no proposals."""
  if not run.configuration.scheme.scored_with_structure:
    return None
  beam = BeamProposals.for_model(scorer, run.tokenizer, run.configuration, k=syntactic.proposals,
                                 **search_options(syntactic))
  return FallbackProposals(beam, FlatProposals())


def source_stats(source: ProposalSource | None) -> dict:
  """A source's counters (a fallback's merged with its primary's)."""
  stats = dict(getattr(source, "stats", None) or {})
  if isinstance(source, FallbackProposals):
    stats.update(getattr(source.primary, "stats", None) or {})
  return stats
