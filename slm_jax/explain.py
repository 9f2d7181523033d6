"""Show what a configuration sees: tokens, kinds, targets, TG metadata and attention, per document.

  python -m slm_jax.explain --linearization=lin2 --attention=tg trees.mrg
  python -m slm_jax.explain --configuration=tgnomask_mix_tg --sentences < trees.txt
  python -m slm_jax.explain --configuration=tg --embedded=2          # embedded treebank documents

Reads PTB trees from the files or folders (or stdin when none is given). By default each file (or
stdin) is one document whose sentences are its trees; `--sentences` makes every tree its own
document. Input without any tree is an error; skipped trees and empty files are counted on stderr. Writes one
JSON object per document and line (stable format, see README "Inspecting a configuration"):

  configuration, linearization, attention   what was explained
  tokens      symbols: "<s>", "(S", "Cats", "VP)", ")", "<P>", "</s>"
  kinds       BOS TERMINAL ONT CNT CNT1 CNT2 PAUSE EOS PAD (SPEC §2)
  targets     whether each token is a prediction target (SPEC §4)
  position, depth, pop, is_compose   SPEC §3 metadata; pop == len(tokens) means never popped
  attends     for each query, the key indices it attends (single attention types)
  attends_by_head   for hybrids: one such list per head group, in SPEC §3 order

`--format=table` prints the same information as an aligned table for reading; `--format=png
--out=F.png` draws the attention mask of the first document (query rows × key columns, one panel
per head group for hybrids).
"""

from __future__ import annotations

import json
import sys
from typing import Iterable, Sequence as SequenceT

import numpy as np

from slm_jax import cli, configurations, ptb
from slm_jax.kinds import Kind
from slm_jax.linearize import SCHEMES, linearize
from slm_jax.structure import dense_mask, parse_attention, row_metadata, target_mask
from slm_jax.trees import Tree


def explain_document(document: SequenceT[Tree], configuration: configurations.Configuration,
                     seed: int = 0) -> dict:
  """The JSON-ready explanation of one document under `configuration`."""
  sequence = linearize(document, configuration.linearization, seed=seed)
  segment = np.ones(len(sequence), np.int32)
  meta = row_metadata(sequence.kinds, segment)
  targets = target_mask(sequence.kinds, segment, configuration.linearization,
                        configuration.attention)
  masks = dense_mask(meta, configuration.attention)  # [G, T, T]
  attends = [[np.flatnonzero(row).tolist() for row in group] for group in masks]
  is_compose = (sequence.kinds == Kind.CNT1) & configuration.attention.tg_family
  out = {
      "configuration": configuration.name,
      "linearization": configuration.linearization,
      "attention": configuration.attention.name,
      "tokens": sequence.symbols(),
      "kinds": [Kind(k).name for k in sequence.kinds.tolist()],
      "targets": targets.tolist(),
      "position": meta.position.tolist(),
      "depth": meta.depth.tolist(),
      "pop": meta.pop.tolist(),
      "is_compose": is_compose.tolist(),
  }
  if len(attends) == 1:
    out["attends"] = attends[0]
  else:
    out["attends_by_head"] = attends
  return out


def format_table(explained: dict) -> str:
  """A human-readable table of one explained document."""
  groups = explained.get("attends_by_head") or [explained["attends"]]
  tokens = explained["tokens"]
  width = max(len(t) for t in tokens) + 1
  header = (f"# {explained['configuration']}: {explained['linearization']} + "
            f"{explained['attention']}")
  lines = [header, f"{'i':>4} {'token':<{width}} {'kind':<8} tgt depth  pop  attends"]
  for i, token in enumerate(tokens):
    seen = " | ".join(" ".join(tokens[j] for j in group[i]) for group in groups)
    lines.append(f"{i:>4} {token:<{width}} {explained['kinds'][i]:<8} "
                 f"{'y' if explained['targets'][i] else '.':>3} {explained['depth'][i]:>5} "
                 f"{explained['pop'][i]:>4}  {seen}")
  return "\n".join(lines)


def draw_masks(explained: dict, out: str):
  """The attention mask of one explained document as a picture (one panel per head group);
  returns the matplotlib figure."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  groups = explained.get("attends_by_head") or [explained["attends"]]
  names = [g.name.lower() for g in parse_attention(explained["attention"]).groups]
  tokens = explained["tokens"]
  size = max(4.0, 0.22 * len(tokens) + 1.5)
  figure, axes = plt.subplots(1, len(groups), figsize=(size * len(groups), size), squeeze=False)
  for axis, name, group in zip(axes[0], names, groups):
    mask_TS = np.zeros((len(tokens), len(tokens)))
    for query, keys in enumerate(group):
      mask_TS[query, keys] = 1.0
    axis.imshow(mask_TS, cmap="Blues", vmin=0, vmax=1.25, interpolation="nearest")
    ticks = np.arange(len(tokens))
    axis.set_xticks(ticks, tokens, rotation=90, fontsize=7)
    axis.set_yticks(ticks, tokens, fontsize=7)
    axis.set(xlabel="key", ylabel="query", title=f"{explained['configuration']}: {name} "
             f"({explained['linearization']})")
  figure.tight_layout()
  figure.savefig(out, dpi=110)
  plt.close(figure)
  return figure


@cli.options
class ExplainOptions:
  """The flags of `python -m slm_jax.explain` (the module docstring)."""

  files: tuple[str, ...] = cli.option((), positional=True, help="PTB files (default: stdin)")
  configuration: str | None = cli.option(None, help="a SPEC §5 name: " +
                                         ", ".join(configurations.CONFIGURATIONS))
  linearization: str | None = cli.option(None, choices=SCHEMES)
  attention: str | None = cli.option(None, help="causal, tg, tg_nomask, tg_nomask_aug or "
                                     "mix(A,B)")
  sentences: bool = cli.option(False, help="every tree is its own document")
  seed: int = cli.option(0, help="lin1_shuf seed")
  lenient: bool = cli.option(False, help="skip malformed trees (counted on stderr) instead of "
                             "failing")
  embedded: int = cli.option(0, metavar="N", help="explain N documents of the embedded "
                             "treebank instead of files")
  embedded_seed: int = cli.option(0)
  format: str = cli.option("json", choices=("json", "table", "png"),
                           help="png: draw the first document's attention mask into --out")
  out: str | None = cli.option(None, help="the picture of --format=png (.png, .pdf, .svg)")

  def validate(self) -> None:
    if self.format == "png" and not self.out:
      raise cli.CliError("--format=png needs --out=FILE.png")


def _documents(options: ExplainOptions, report: ptb.ReadReport) -> Iterable[list[Tree]]:
  if options.embedded:
    from slm_jax.corpus import treebank  # pylint: disable=g-import-not-at-top
    yield from treebank.generate_documents(options.embedded, seed=options.embedded_seed)
    return
  if options.files:  # files and folders (each file one document), empty files counted
    yield from ptb.read_documents(list(options.files), sentences=options.sentences,
                                  lenient=options.lenient, report=report)
    return
  trees = ptb.parse_trees(sys.stdin.read(), source="<stdin>", lenient=options.lenient,
                          report=report)
  if not trees:
    report.empty_files += 1
  yield from ([t] for t in trees) if options.sentences else ([trees] if trees else [])


def explain(options: ExplainOptions) -> int:
  """Prints what `options`' configuration sees of each document (or draws the first one's
  attention); the exit code."""
  configuration = configurations.resolve(options.configuration, options.linearization,
                                         options.attention)
  report = ptb.ReadReport()
  count = 0
  try:
    for document in _documents(options, report):
      count += 1
      explained = explain_document(document, configuration, seed=options.seed)
      if options.format == "png":
        draw_masks(explained, options.out)
        print(f"wrote {options.out}: the attention of {len(explained['tokens'])} tokens")
        break
      if options.format == "json":
        print(json.dumps(explained, separators=(",", ":")))
      else:
        print(format_table(explained) + "\n")
  except BrokenPipeError:  # `explain … | head`: the reader went away, not an error
    sys.stderr.close()
    return 0
  if not count:
    where = ", ".join(options.files) if options.files else "stdin"
    summary = "; ".join(line.strip() for line in report.summary().splitlines())
    raise cli.CliError(f"no trees to explain in {where} ({summary})")
  if report.noteworthy:
    print(f"explain: {report.summary()}", file=sys.stderr)
  return 0


def _main(argv: list[str] | None) -> int:
  return explain(cli.parse_options(ExplainOptions, argv, prog="python -m slm_jax.explain",
                                   doc=__doc__))


def main(argv: list[str] | None = None) -> int:
  """The CLI: errors (a bad configuration, a malformed tree, a missing file) end as one
  `error: …` line and exit code 2 (`slm_jax.cli`)."""
  return cli.run(_main, argv)


if __name__ == "__main__":
  sys.exit(main())
