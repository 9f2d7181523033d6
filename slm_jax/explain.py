"""Show what a configuration sees: tokens, kinds, targets, TG metadata and attention, per document.

  python -m slm_jax.explain --linearization=lin2 --attention=tg trees.mrg
  python -m slm_jax.explain --configuration=tgnomask_mix_tg --sentences < trees.txt
  python -m slm_jax.explain --configuration=tg --embedded=2          # embedded treebank documents

Reads PTB trees from the files (or stdin when none is given). By default each file (or stdin) is one
document whose sentences are its trees; `--sentences` makes every tree its own document. Writes one
JSON object per document and line (stable format, see README "Inspecting a configuration"):

  configuration, linearization, attention   what was explained
  tokens      symbols: "<s>", "(S", "Cats", "VP)", ")", "<P>", "</s>"
  kinds       BOS TERMINAL ONT CNT CNT1 CNT2 PAUSE EOS PAD (SPEC §2)
  targets     whether each token is a prediction target (SPEC §4)
  position, depth, pop, is_compose   SPEC §3 metadata; pop == len(tokens) means never popped
  attends     for each query, the key indices it attends (single attention types)
  attends_by_head   for hybrids: one such list per head group, in SPEC §3 order

`--format=table` prints the same information as an aligned table for reading.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Iterable, Sequence as SequenceT, TextIO

import numpy as np

from slm_jax import configurations, ptb
from slm_jax.kinds import Kind
from slm_jax.linearize import SCHEMES, linearize
from slm_jax.structure import dense_mask, row_metadata, target_mask
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
  is_compose = (sequence.kinds == Kind.CNT1) & configuration.attention.is_structural
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


def _documents(args, report: ptb.ReadReport) -> Iterable[list[Tree]]:
  if args.embedded:
    from slm_jax.corpus import treebank  # pylint: disable=g-import-not-at-top
    yield from treebank.generate_documents(args.embedded, seed=args.embedded_seed)
    return
  sources: list[tuple[str, TextIO | None]] = (
      [(path, None) for path in args.files] if args.files else [("<stdin>", sys.stdin)])
  for name, stream in sources:
    if stream is None:
      trees = ptb.read_file(name, lenient=args.lenient, report=report)
    else:
      trees = ptb.parse_trees(stream.read(), source=name, lenient=args.lenient, report=report)
    if args.sentences:
      yield from ([t] for t in trees)
    elif trees:
      yield trees
    else:
      report.skipped_by_reason["document without trees"] += 1


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(prog="python -m slm_jax.explain", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("files", nargs="*", help="PTB files (default: stdin)")
  parser.add_argument("--configuration", help="a SPEC §5 name: " +
                      ", ".join(configurations.CONFIGURATIONS))
  parser.add_argument("--linearization", choices=SCHEMES)
  parser.add_argument("--attention", help="causal, tg, tg_nomask, tg_nomask_aug or mix(A,B)")
  parser.add_argument("--sentences", action="store_true", help="every tree is its own document")
  parser.add_argument("--seed", type=int, default=0, help="lin1_shuf seed")
  parser.add_argument("--lenient", action="store_true",
                      help="skip malformed trees (counted on stderr) instead of failing")
  parser.add_argument("--embedded", type=int, default=0, metavar="N",
                      help="explain N documents of the embedded treebank instead of files")
  parser.add_argument("--embedded-seed", "--embedded_seed", type=int, default=0)
  parser.add_argument("--format", choices=("json", "table"), default="json")
  return parser


def main(argv: list[str] | None = None) -> int:
  args = _parser().parse_args(argv)
  try:
    configuration = configurations.resolve(args.configuration, args.linearization, args.attention)
  except ValueError as error:
    print(f"error: {error}", file=sys.stderr)
    return 2
  report = ptb.ReadReport()
  try:
    for document in _documents(args, report):
      explained = explain_document(document, configuration, seed=args.seed)
      if args.format == "json":
        print(json.dumps(explained, separators=(",", ":")))
      else:
        print(format_table(explained) + "\n")
  except (ptb.TreeError, FileNotFoundError) as error:
    print(f"error: {error}", file=sys.stderr)
    return 2
  except BrokenPipeError:  # `explain … | head`: the reader went away, not an error
    sys.stderr.close()
    return 0
  if report.trees_skipped or sum(report.skipped_by_reason.values()) or report.unknown_labels:
    print(f"explain: {report.summary()}", file=sys.stderr)
  return 0


if __name__ == "__main__":
  sys.exit(main())
