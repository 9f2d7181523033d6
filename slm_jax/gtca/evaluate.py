"""GTCA evaluation (SPEC §10): MCQA letter scoring, BLiMP pairs, CoLA MCC, option drift, tables.

- **MCQA**: the score of option i is the conditional log-likelihood of its letter after
  `Answer:` (`letter_scores`: one forward pass per prompt, the log-softmax at the prompt's last
  position, gathered at the letters' ids); a question is right iff its answer's score is strictly
  above every other option's (a tie is wrong, as BLiMP's ties are, SPEC §9).
- **BLiMP**: summed log-likelihood of each sentence, right iff good > bad (`pair_accuracy`,
  `slm_jax.eval.blimp.pair_verdicts`). Two metrics, never mixed: `blimp` is the toy task's
  BLiMP-style pairs (`slm_jax.gtca.train`; older result.json files have only it), `blimp_real`
  (`REAL_BLIMP`) the real BLiMP's 67 paradigms, the mean of per-paradigm accuracies, and
  `blimp_real_<field>` (`slm_jax.gtca.real_sets.blimp_metrics`).
- **CoLA**: Matthews correlation of binary predictions (`matthews_corrcoef`, ×100 in tables as the
  paper prints it).
- **Option drift** (paper: 0.013 per token with the mask, 0.021 without): for every question
  and option pair (i, j) the gap s_i − s_j of per-token option scores with the branch and
  without it (α = 0, same weights); drift = mean |Δgap| over all pairs of all questions.
- **Seeds**: `mean_sd` (sample SD, ddof = 1; one run → SD 0) and `format_mean_sd`.
- **Tables**: `main_table` (paper's main table: one row per method — Backbone, LoRA-only,
  Direct-Joint, GTCA — one column per benchmark) and `ablation_table` (full GTCA then one row
  per ablation), mean ± SD over seeds, the best mean per column in bold.

CLI: `python -m slm_jax.gtca.evaluate --runs=DIR [--runs=DIR …] [--out=FILE.md]` reads every
`result.json` that `python -m slm_jax.gtca.train` wrote under the DIRs (one per method, ablation
and seed), groups them by method and prints both tables (the columns some run measured).
`python -m slm_jax.gtca.evaluate --run=DIR --task=SET --data_root=DOWNLOAD --cache=FILE` scores
one finished run on a real set (CLOTH, MMLU, HellaSwag, WinoGrande by letter log-likelihood;
CoLA as MCC; BLiMP's pairs, `--limit` = pairs per paradigm; `slm_jax.gtca.real_sets`), writes
DIR/eval_SET.json and adds the metrics (and the counts, under `eval_counts`) to its result.json.
"""

from __future__ import annotations

import collections
import json
import math
import pathlib
import sys
from typing import Any, Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from slm_jax import cli
from slm_jax.buckets import bucket
from slm_jax.eval.blimp import pair_verdicts
from slm_jax.gtca.forward import gtca_logits, merge_models
from slm_jax.gtca.spans import SpanTree, chunk_batch
from slm_jax.hf.scoring import plain_rows

MAIN_METHODS = ("backbone", "lora_only", "direct_joint", "gtca")
ABLATIONS = ("gtca", "no_gate", "no_mask", "stage2_only", "weak_parser", "random_trees",
             "permuted_trees")
DISPLAY = {"backbone": "Backbone", "lora_only": "LoRA-only", "direct_joint": "Direct-Joint",
           "gtca": "GTCA", "no_gate": "w/o gate (g ≡ 1)", "no_mask": "w/o mask (m ≡ 1)",
           "stage2_only": "Stage 1+2 (no stage 3)", "weak_parser": "Weak parser",
           "random_trees": "Random trees", "permuted_trees": "Permuted trees"}
REAL_BLIMP = "blimp_real"  # the real BLiMP's metric; "blimp": the toy's BLiMP-style pairs
METRIC_NAMES = {"toy": "Toy MCQA↑", "toy_pp": "PP↑", "toy_src": "SRC↑", "toy_orc": "ORC↑",
                "cloth": "CLOTH↑", "mmlu": "MMLU↑", "blimp": "BLiMP(-style pairs)↑",
                REAL_BLIMP: "BLiMP (67 paradigms)↑", "cola": "CoLA (MCC)↑",
                "hellaswag": "HellaSwag↑", "winogrande": "WinoGrande↑", "drift": "Drift↓"}
LOWER_BETTER = {"drift"}


# ---- metrics ------------------------------------------------------------------------------------
def _ragged(scores: Sequence[Sequence[float]] | np.ndarray) -> np.ndarray:
  """Per-question option scores as float64 [Q, O], NaN where a question has fewer options."""
  if isinstance(scores, np.ndarray) and scores.ndim == 2:
    return scores.astype(np.float64)
  rows = [np.asarray(s, np.float64).reshape(-1) for s in scores]
  width = max((len(r) for r in rows), default=0)
  out = np.full((len(rows), width), np.nan)
  for q, r in enumerate(rows):
    out[q, :len(r)] = r
  return out


def mcqa_correct(scores_QO, answers_Q) -> np.ndarray:
  """bool [Q]: the answer's score is finite and strictly above every other option's score.
  Padding (NaN beyond a question's options) never wins; an unlabeled answer (−1) is an error."""
  scores_QO = _ragged(scores_QO)
  answers_Q = np.asarray(answers_Q, np.int64)
  if scores_QO.shape[0] != answers_Q.shape[0]:
    raise ValueError(f"{scores_QO.shape[0]} score rows for {answers_Q.shape[0]} answers")
  bad = np.flatnonzero((answers_Q < 0) | (answers_Q >= max(scores_QO.shape[1], 1)))
  if bad.size:
    raise ValueError(f"question {int(bad[0])}: answer {int(answers_Q[bad[0]])} is not one of "
                     f"its {scores_QO.shape[1]} options (unlabeled questions cannot be scored)")
  q = np.arange(len(answers_Q))
  right_Q = scores_QO[q, answers_Q]
  others_QO = np.where(np.arange(scores_QO.shape[1])[None, :] == answers_Q[:, None], -np.inf,
                       np.nan_to_num(scores_QO, nan=-np.inf, posinf=np.inf, neginf=-np.inf))
  return np.isfinite(right_Q) & (right_Q > others_QO.max(axis=1, initial=-np.inf))


def accuracy(correct_N) -> float:
  """Percent of True (NaN for an empty set)."""
  correct_N = np.asarray(correct_N, bool)
  return 100.0 * float(correct_N.mean()) if correct_N.size else float("nan")


def pair_accuracy(good_N, bad_N) -> float:
  """BLiMP: percent of pairs whose good sentence has the higher summed log-likelihood."""
  return accuracy(pair_verdicts(np.asarray(good_N), np.asarray(bad_N))[0])


def matthews_corrcoef(labels_N, predictions_N) -> float:
  """MCC of binary labels/predictions (0/1 or bool), in [−1, 1]; 0 when a marginal is constant
  (the convention of sklearn: the denominator is 0)."""
  y = np.asarray(labels_N).astype(bool).reshape(-1)
  p = np.asarray(predictions_N).astype(bool).reshape(-1)
  if y.shape != p.shape:
    raise ValueError(f"{y.size} labels but {p.size} predictions")
  tp, tn = float(np.sum(y & p)), float(np.sum(~y & ~p))
  fp, fn = float(np.sum(~y & p)), float(np.sum(y & ~p))
  denominator = math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
  return 0.0 if denominator == 0 else (tp * tn - fp * fn) / denominator


def option_drift(with_QO, without_QO, tokens_QO=None) -> float:
  """Mean |Δ(s_i − s_j)| over option pairs i < j of every question, scores per token.

  `with_QO` / `without_QO`: summed option log-likelihoods with and without the branch (ragged
  lists or NaN-padded [Q, O]); `tokens_QO` the options' token counts (None: 1 each, as for
  single-token letters). Questions with one option contribute nothing; no pair at all → NaN.
  """
  a_QO, b_QO = _ragged(with_QO), _ragged(without_QO)
  if a_QO.shape != b_QO.shape:
    raise ValueError(f"scores with the branch {a_QO.shape} and without {b_QO.shape} differ")
  if tokens_QO is not None:
    n_QO = _ragged(tokens_QO)
    if n_QO.shape != a_QO.shape:
      raise ValueError(f"token counts {n_QO.shape} do not fit the scores {a_QO.shape}")
    if np.any(n_QO[np.isfinite(n_QO)] <= 0):
      raise ValueError("an option has no tokens")
    a_QO, b_QO = a_QO / n_QO, b_QO / n_QO
  gap = lambda s: s[:, :, None] - s[:, None, :]
  change_QOO = np.abs(gap(a_QO) - gap(b_QO))
  upper_OO = np.triu(np.ones((a_QO.shape[1],) * 2, bool), k=1)
  values = change_QOO[:, upper_OO]
  values = values[np.isfinite(values)]
  return float(values.mean()) if values.size else float("nan")


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
  """(mean, sample SD with ddof=1; 0 for one value) of finite values; (NaN, NaN) when none."""
  v = np.asarray([x for x in values if x is not None and np.isfinite(x)], np.float64)
  if not v.size:
    return float("nan"), float("nan")
  return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0


def format_mean_sd(values: Sequence[float], digits: int = 2) -> str:
  """`83.12 ± 0.41` (n > 1), `83.12` (one run), `–` (none)."""
  mean, sd = mean_sd(values)
  if not math.isfinite(mean):
    return "–"
  n = sum(1 for x in values if x is not None and np.isfinite(x))
  return f"{mean:.{digits}f} ± {sd:.{digits}f}" if n > 1 else f"{mean:.{digits}f}"


# ---- batches and letter scores -------------------------------------------------------------------
class Encoded:
  """One encoded MCQA example: `ids_T` = the prompt's ids then the answer letter's id (the
  training row), `tree` the span tree over the prompt's tokens, `letter_ids` the ids of the
  option letters A, B, … (one token each), `answer` the right option, `group` a breakdown key
  (the toy task's attractor). The letter is predicted at position `len(tree) − 1`, the prompt's
  last token (`Answer:`)."""

  __slots__ = ("ids_T", "tree", "letter_ids", "answer", "group", "example_id")

  def __init__(self, ids_T, tree: SpanTree, letter_ids, answer: int, group: str = "",
               example_id: str = ""):
    self.ids_T = np.asarray(ids_T, np.int32)
    self.tree, self.letter_ids = tree, tuple(int(i) for i in letter_ids)
    self.answer, self.group, self.example_id = int(answer), group, example_id
    if self.tree.n_tokens != len(self.ids_T) - 1:
      raise ValueError(f"example {example_id}: span tree over {self.tree.n_tokens} tokens, "
                       f"but the row has {len(self.ids_T)} = prompt + 1 letter")
    if not 0 <= self.answer < len(self.letter_ids):
      raise ValueError(f"example {example_id}: answer {answer} outside "
                       f"{len(self.letter_ids)} options")

  @property
  def position(self) -> int:
    return self.tree.n_tokens - 1


def row_width(examples: Sequence[Encoded], least: int = 16) -> int:
  """The padded row length of a set of examples (one bucket: one compiled shape)."""
  return bucket(max(len(e.ids_T) for e in examples), least)


def make_batch(examples: Sequence[Encoded], width: int, n_layers: int, k: int,
               rows: int | None = None, pad_id: int = 0) -> dict[str, Any]:
  """{tokens, meta, targets, chunks, positions, letters, options, answers} of B examples padded
  to `rows` rows of `width` tokens. targets mark the answer letter only (loss on the answer
  completion); padding rows have no target, letters −1 → masked options."""
  rows = len(examples) if rows is None else rows
  if len(examples) > rows:
    raise ValueError(f"{len(examples)} examples do not fit {rows} rows")
  tokens, meta = plain_rows([e.ids_T for e in examples], width, rows, pad_id)
  targets = np.zeros((rows, width), bool)
  positions = np.zeros(rows, np.int32)
  width_o = max(len(e.letter_ids) for e in examples)
  letters = np.zeros((rows, width_o), np.int32)
  options = np.zeros((rows, width_o), bool)
  answers = np.full(rows, -1, np.int32)
  for r, e in enumerate(examples):
    targets[r, e.position + 1] = True
    positions[r] = e.position
    letters[r, :len(e.letter_ids)] = e.letter_ids
    options[r, :len(e.letter_ids)] = True
    answers[r] = e.answer
  trees = [e.tree for e in examples] + [SpanTree(None, 0)] * (rows - len(examples))
  chunks = chunk_batch(trees, n_layers, width, k)
  return {"tokens": tokens, "meta": meta, "targets": targets, "chunks": chunks,
          "positions": positions, "letters": letters, "options": options, "answers": answers}


def device_batch(batch: Mapping[str, Any]) -> dict[str, Any]:
  """The arrays `forward.batch_loss` reads (tokens, meta, targets, chunks) as jax arrays."""
  return {name: jax.tree.map(jnp.asarray, batch[name])
          for name in ("tokens", "meta", "targets", "chunks")}


def make_letter_scorer(graphdefs: tuple) -> Callable:
  """`score(params, batch, alpha) -> float32 [B, O]`: log p(letter_o | prompt) at each row's
  last prompt position; masked options are −inf. Runs the branch when params has "gtca"."""

  def score(params, tokens, meta, chunks, positions, letters, options, alpha):
    decoder, gtca = merge_models(graphdefs, params)
    if gtca is None:
      logits_BTV = decoder(tokens, meta)
    else:
      logits_BTV = gtca_logits(decoder, gtca, tokens, meta, chunks, alpha)
    last_BV = jnp.take_along_axis(logits_BTV, positions[:, None, None], axis=1)[:, 0]
    logp_BV = jax.nn.log_softmax(last_BV.astype(jnp.float32), axis=-1)
    picked_BO = jnp.take_along_axis(logp_BV, letters, axis=-1)
    return jnp.where(options, picked_BO, -jnp.inf)

  jitted = jax.jit(score)

  def run(params, batch, alpha):
    b = {name: jax.tree.map(jnp.asarray, batch[name]) for name in
         ("tokens", "meta", "chunks", "positions", "letters", "options")}
    return jitted(params, b["tokens"], b["meta"], b["chunks"], b["positions"], b["letters"],
                  b["options"], jnp.asarray(alpha, jnp.float32))

  return run


def letter_scores(scorer: Callable, params, examples: Sequence[Encoded], alpha: float, *,
                  n_layers: int, k: int, batch_size: int = 32, width: int | None = None,
                  pad_id: int = 0) -> np.ndarray:
  """float64 [Q, O] letter log-likelihoods of every example (NaN beyond its options), in
  fixed-shape batches (one compile)."""
  if not examples:
    return np.zeros((0, 0))
  width = width or row_width(examples)
  width_o = max(len(e.letter_ids) for e in examples)
  out = np.full((len(examples), width_o), np.nan)
  for start in range(0, len(examples), batch_size):
    chunk = examples[start:start + batch_size]
    batch = make_batch(chunk, width, n_layers, k, rows=batch_size, pad_id=pad_id)
    scores = np.asarray(scorer(params, batch, alpha), np.float64)[:len(chunk)]
    scores = scores[:, :out.shape[1]] if scores.shape[1] >= out.shape[1] else np.pad(
        scores, ((0, 0), (0, out.shape[1] - scores.shape[1])), constant_values=-np.inf)
    out[start:start + len(chunk)] = np.where(np.isneginf(scores), np.nan, scores)
  return out


def make_sequence_scorer(graphdefs: tuple) -> Callable:
  """`score(params, tokens, meta, chunks, alpha) -> float32 [B]`: the summed log-likelihood of
  every row's tokens after its first (BLiMP's sentence score; padding excluded)."""

  def score(params, tokens, meta, chunks, alpha):
    decoder, gtca = merge_models(graphdefs, params)
    if gtca is None:
      logits_BTV = decoder(tokens, meta)
    else:
      logits_BTV = gtca_logits(decoder, gtca, tokens, meta, chunks, alpha)
    logp_BSV = jax.nn.log_softmax(logits_BTV[:, :-1].astype(jnp.float32), axis=-1)
    picked_BS = jnp.take_along_axis(logp_BSV, tokens[:, 1:, None], axis=-1)[..., 0]
    return jnp.where(meta.segment[:, 1:] > 0, picked_BS, 0.0).sum(axis=-1)

  return jax.jit(score)


def sentence_scores(scorer: Callable, params, rows: Sequence[tuple[np.ndarray, SpanTree]],
                    alpha: float, *, n_layers: int, k: int, batch_size: int = 32,
                    width: int | None = None, pad_id: int = 0) -> np.ndarray:
  """float64 [N] summed log-likelihoods of (ids_T, span tree over all of ids_T) rows."""
  if not rows:
    return np.zeros(0)
  width = width or bucket(max(len(ids) for ids, _ in rows), 16)
  out = np.zeros(len(rows))
  for start in range(0, len(rows), batch_size):
    chunk = rows[start:start + batch_size]
    ids = [r[0] for r in chunk]
    tokens, meta = plain_rows(ids, width, batch_size, pad_id)
    trees = [r[1] for r in chunk] + [SpanTree(None, 0)] * (batch_size - len(chunk))
    chunks = chunk_batch(trees, n_layers, width, k)
    as_jax = lambda x: jax.tree.map(jnp.asarray, x)
    scores = scorer(params, as_jax(tokens), as_jax(meta), as_jax(chunks),
                    jnp.asarray(alpha, jnp.float32))
    out[start:start + len(chunk)] = np.asarray(scores, np.float64)[:len(chunk)]
  return out


def mcqa_metrics(scores_QO: np.ndarray, examples: Sequence[Encoded], prefix: str = "toy"
                 ) -> dict[str, float]:
  """Accuracy (%) overall (`prefix`) and per example group (`prefix_group`)."""
  correct = mcqa_correct(scores_QO, [e.answer for e in examples])
  out = {prefix: accuracy(correct)}
  groups = np.asarray([e.group for e in examples])
  for group in sorted(set(groups) - {""}):
    out[f"{prefix}_{group}"] = accuracy(correct[groups == group])
  return out


# ---- tables -------------------------------------------------------------------------------------
def _table(results: Mapping[str, Mapping[str, Sequence[float]]], rows: Sequence[str],
           metrics: Sequence[str], first: str) -> str:
  rows = [r for r in rows if r in results]
  header = [first, *(METRIC_NAMES.get(m, m) for m in metrics), "n"]
  best = {}
  for m in metrics:
    means = [(mean_sd(results[r].get(m, ()))[0], r) for r in rows]
    means = [(v, r) for v, r in means if math.isfinite(v)]
    if len(means) > 1:
      best[m] = (min if m in LOWER_BETTER else max)(means)[1]
  lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * len(header)) + "|"]
  for r in rows:
    cells = [DISPLAY.get(r, r)]
    for m in metrics:
      text = format_mean_sd(results[r].get(m, ()), 3 if m == "drift" else 2)
      cells.append(f"**{text}**" if best.get(m) == r else text)
    seeds = max((len(results[r].get(m, ())) for m in metrics), default=0)
    cells.append(str(seeds))
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines)


def main_table(results: Mapping[str, Mapping[str, Sequence[float]]],
               metrics: Sequence[str] = ("toy", "toy_pp", "toy_src", "toy_orc", "blimp"),
               methods: Sequence[str] = MAIN_METHODS) -> str:
  """The paper's main-table layout: method rows, benchmark columns, mean ± SD over seeds."""
  return _table(results, methods, metrics, "Method")


def ablation_table(results: Mapping[str, Mapping[str, Sequence[float]]],
                   metrics: Sequence[str] = ("toy", "toy_pp", "toy_src", "toy_orc", "blimp",
                                             "drift"),
                   ablations: Sequence[str] = ABLATIONS) -> str:
  """The paper's ablation-table layout: full GTCA first, then one row per ablation."""
  return _table(results, ablations, metrics, "Variant")


def collect(run_dirs: Sequence[str | pathlib.Path]) -> dict[str, dict[str, list[float]]]:
  """method → metric → values over seeds, from every `result.json` under `run_dirs`."""
  grouped: dict[str, dict[str, list[float]]] = collections.defaultdict(
      lambda: collections.defaultdict(list))
  found = 0
  for root in run_dirs:
    root = pathlib.Path(root)
    files = [root] if root.is_file() else sorted(root.rglob("result.json"))
    for path in files:
      try:
        result = json.loads(path.read_text())
        method, metrics = result["method"], result["metrics"]
      except (OSError, json.JSONDecodeError, KeyError, TypeError) as error:
        raise ValueError(f"{path}: not a GTCA result file ({type(error).__name__}: {error})"
                         ) from None
      found += 1
      for name, value in metrics.items():
        if isinstance(value, (int, float)):
          grouped[method][name].append(float(value))
  if not found:
    raise FileNotFoundError(f"no result.json under {', '.join(map(str, run_dirs))}")
  return {m: dict(v) for m, v in grouped.items()}


MAIN_COLUMNS = ("toy", "toy_pp", "toy_src", "toy_orc", "cloth", "mmlu", "hellaswag",
                "winogrande", "blimp", REAL_BLIMP, "cola")


def present(results: Mapping[str, Mapping[str, Sequence[float]]],
            columns: Sequence[str]) -> tuple[str, ...]:
  """The columns some method has a value for (a table shows only measured benchmarks)."""
  return tuple(c for c in columns if any(results[m].get(c) for m in results))


def report(results: Mapping[str, Mapping[str, Sequence[float]]]) -> str:
  """Both tables as Markdown, each under a heading, with the benchmarks the runs measured."""
  return ("## Main results (mean ± SD over seeds)\n\n"
          + main_table(results, present(results, MAIN_COLUMNS)) +
          "\n\n## Ablations (mean ± SD over seeds)\n\n"
          + ablation_table(results, present(results, (*MAIN_COLUMNS, "drift"))) + "\n")


def evaluate_run(args) -> int:
  """`--run=DIR --task=SET`: score a finished training run on a real set, write
  DIR/eval_SET.json and add the metrics to DIR/result.json (so `--runs` tables show them)."""
  from slm_jax.gtca import real_sets, train  # pylint: disable=import-outside-toplevel  (CLI layer)
  if not args.task or not args.data_root or not args.cache:
    raise cli.CliError("--run needs --task, --data_root (the set's download) and --cache (its "
                       "parse cache)")
  log = lambda line: print(line, flush=True)
  restored = train.restore_run(args.run, log)
  out = real_sets.score_run(restored, args.task, args.data_root, args.cache, limit=args.limit,
                            fit_limit=args.fit_limit, log=log)
  run_dir = pathlib.Path(args.run)
  (run_dir / f"eval_{args.task}.json").write_text(json.dumps(out, indent=1))
  result = json.loads((run_dir / "result.json").read_text())
  result["metrics"].update(out["metrics"])
  result.setdefault("eval_counts", {})[args.task] = out["counts"]
  (run_dir / "result.json").write_text(json.dumps(result, indent=1))
  log(f"{args.task}: " + ", ".join(f"{k} {v:.3f}" for k, v in out["metrics"].items())
      + f"; truncated {out['counts']['truncated']} -> {run_dir / f'eval_{args.task}.json'}")
  return 0


def main(argv: Sequence[str] | None = None) -> int:
  parser = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--runs", action="append",
                      help="a folder searched for result.json files (repeatable), or one file")
  parser.add_argument("--out", default="", help="also write the tables to this Markdown file")
  parser.add_argument("--run", help="instead of --runs: score this finished run on --task")
  parser.add_argument("--task", help="cloth, mmlu, hellaswag, winogrande, cola or blimp")
  parser.add_argument("--data_root", help="the set's Hugging Face download")
  parser.add_argument("--cache", help="the parse cache of the set's prompts for the run's backbone")
  parser.add_argument("--limit", type=int, default=0,
                      help="first N evaluation rows (blimp: N pairs per paradigm; 0: all)")
  parser.add_argument("--fit_limit", type=int, default=0,
                      help="CoLA: first N train rows fit the acceptability threshold (0: all)")
  args = parser.parse_args(argv)
  if bool(args.runs) == bool(args.run):
    raise cli.CliError("give --runs (tables of finished runs) or --run with --task (score one)")
  if args.run:
    return evaluate_run(args)
  text = report(collect(args.runs))
  print(text)
  if args.out:
    pathlib.Path(args.out).write_text(text)
  return 0


if __name__ == "__main__":
  sys.exit(cli.run(main))
