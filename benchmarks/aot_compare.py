"""The fused kernel beside the XLA attention path: two `python -m slm_jax.aot` tables side by side.

  python -m slm_jax.aot --topology=v5p-64 --config=… --config.model.attention_impl=pallas_tpu > fused.md
  python -m slm_jax.aot --topology=v5p-64 --config=… --config.model.attention_impl=xla > xla.md
  python benchmarks/aot_compare.py fused.md xla.md

One row per configuration found in both: total memory per chip (GiB), temporaries, XLA's FLOPs per
step and chip, and compile seconds of each path, and the ratios fused / XLA (computed from the
tables' printed values, 3 significant digits). Exit status 1 if a configuration's fused memory
exceeds the XLA path's.
"""

from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slm_jax import cli  # noqa: E402
from slm_jax.benchtools import parser as make_parser, table  # noqa: E402


def read_table(path: str) -> dict[str, dict[str, str]]:
  """An aot report's rows by configuration (the last Markdown table of the file)."""
  lines = [l for l in pathlib.Path(path).read_text().splitlines() if l.startswith("|")]
  if len(lines) < 3:
    raise cli.CliError(f"{path}: no aot table in it")
  starts = [i for i, l in enumerate(lines) if l.startswith("| config ")]
  lines = lines[starts[-1]:]
  headers = [h.strip() for h in lines[0].strip("|").split("|")]
  rows = [dict(zip(headers, (c.strip() for c in l.strip("|").split("|")))) for l in lines[2:]]
  return {r["config"]: r for r in rows}


def main(argv: list[str] | None = None) -> int:
  parser = make_parser(__doc__)
  parser.add_argument("fused", help="aot output with attention_impl=pallas_tpu (or auto)")
  parser.add_argument("xla", help="aot output with attention_impl=xla")
  args = parser.parse_args(argv)
  fused, xla = read_table(args.fused), read_table(args.xla)
  rows, worse = [], []
  for config, f in fused.items():
    if config not in xla:
      continue
    x = xla[config]
    ratio = float(f["total GiB"]) / float(x["total GiB"])
    if ratio > 1:
      worse.append(config)
    rows.append([config, f["topology"], f["micro-batches"], f["total GiB"], x["total GiB"],
                 f"{ratio:.3f}", f["temps GiB"], x["temps GiB"], f["fits"], x["fits"],
                 f["XLA TFLOP/step/chip"], x["XLA TFLOP/step/chip"],
                 f"{float(f['XLA TFLOP/step/chip']) / float(x['XLA TFLOP/step/chip']):.3f}",
                 f["compile s"], x["compile s"]])
  print(table(["config", "topology", "micro-batches", "fused GiB", "XLA GiB", "fused / XLA",
               "fused temps", "XLA temps", "fused fits", "XLA fits", "fused TFLOP",
               "XLA TFLOP", "TFLOP fused / XLA", "fused compile s", "XLA compile s"], rows))
  if worse:
    print(f"fused memory above the XLA path's: {', '.join(worse)}", file=sys.stderr)
    return 1
  return cli.EXIT_OK


if __name__ == "__main__":
  sys.exit(cli.run(main))
