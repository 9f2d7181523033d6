"""Training curves of one or more runs in one picture.

  python -m slm_jax.plot --workdir=runs/tree_tiny --workdir=runs/tgtree_tiny --out=curves.png

Reads each workdir's `metrics.jsonl` (what `python -m slm_jax.main` writes) and draws three
panels: the training loss by token kind (terminal, structural, pause: one line style each, one
color per run), the held-out terminal perplexity, and the live syntactic metrics over steps
(SyntaxGym and BLiMP accuracy, `train.eval_syntax_every`). A run is labelled by its workdir's
name (two of one name by their paths' tails, `tables.distinct_labels`); a panel a run has no
values for says so. A workdir without metrics is an error.
"""

from __future__ import annotations

import json
import pathlib
import sys
from typing import Sequence

from slm_jax import cli, files
from slm_jax.tables import distinct_labels

METRICS = "metrics.jsonl"
KIND_LOSSES = (("loss_terminal", "-", "terminal"), ("loss_structural", "--", "structural"),
               ("loss_pause", ":", "pause"))
HELD_OUT = (("eval_terminal_ppl", "-", "terminal ppl"),)
SYNTAX = (("live_sg", "-", "SG"), ("live_blimp", "--", "BLiMP"))
PANELS = (("training loss by token kind", "loss (nats / target)", KIND_LOSSES),
          ("held-out perplexity", "terminal perplexity", HELD_OUT),
          ("syntactic generalization", "accuracy (%)", SYNTAX))

Curves = dict[str, list[tuple[int, float]]]


def load_curves(workdir: str | pathlib.Path) -> Curves:
  """metric → [(step, value)] of a workdir's metrics.jsonl (nulls skipped), in file order."""
  path = pathlib.Path(workdir) / METRICS
  if not path.is_file():
    raise cli.CliError(f"{path}: no such file (is {workdir} a workdir of python -m "
                       "slm_jax.main?)")
  curves: Curves = {}
  for number, line in enumerate(files.read_lines(path), 1):
    if not line.strip():
      continue
    try:
      record = json.loads(line)
      step = int(record["step"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError):
      raise cli.CliError(f"{path}:{number}: not a metrics record (JSON with a step)") from None
    for key, value in record.items():
      if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
        curves.setdefault(key, []).append((step, float(value)))
  return curves


def draw(runs: Sequence[tuple[str, Curves]], out: str | pathlib.Path):
  """The three panels of `runs` ((label, curves) each) saved to `out`; returns the figure."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  figure, axes = plt.subplots(1, len(PANELS), figsize=(6 * len(PANELS), 4.5))
  colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
  for axis, (title, ylabel, metrics) in zip(axes, PANELS):
    for index, (label, curves) in enumerate(runs):
      for key, style, name in metrics:
        if curves.get(key):
          steps, values = zip(*curves[key])
          axis.plot(steps, values, style, color=colors[index % len(colors)],
                    label=f"{label}: {name}", marker="." if len(steps) < 3 else None)
    if axis.lines:
      axis.legend(fontsize=7)
    else:
      axis.text(0.5, 0.5, "no values in these runs", ha="center", va="center",
                transform=axis.transAxes, color="gray")
    axis.set(title=title, xlabel="step", ylabel=ylabel)
    axis.grid(alpha=0.3)
  figure.tight_layout()
  figure.savefig(out, dpi=110)
  plt.close(figure)
  return figure


@cli.options
class PlotOptions:
  """The flags of `python -m slm_jax.plot` (the module docstring)."""

  workdir: tuple[str, ...] = cli.option(help="a run; repeat to compare")
  out: str = cli.option(help="the picture (.png, .pdf, .svg)")


def plot_runs(options: PlotOptions) -> list[str]:
  """Draws the curves of `options.workdir` into `options.out`; the labels of the runs."""
  labels = distinct_labels([pathlib.Path(w).name for w in options.workdir],
                           list(options.workdir))
  draw([(label, load_curves(w)) for label, w in zip(labels, options.workdir)], options.out)
  return labels


def _main(argv: list[str] | None) -> int:
  options = cli.parse_options(PlotOptions, argv, prog="python -m slm_jax.plot", doc=__doc__)
  labels = plot_runs(options)
  print(f"wrote {options.out}: {', '.join(labels)}")
  return cli.EXIT_OK


def main(argv: list[str] | None = None) -> int:
  return cli.run(_main, argv)


if __name__ == "__main__":
  sys.exit(main())
