"""Doc-PPL and multiple choice of a pretrained checkpoint: slm_jax vs lm-evaluation-harness, item
for item, in one process.

  python benchmarks/lm_eval_parity.py --checkpoint DIR [--documents 8] [--mc_rows 4]
      [--batch_size 8] [--max_length N]

`DIR`: a Hugging Face checkpoint folder, which lm-eval's `hf` model reads (a GGUF file is first
exported: `python -m slm_jax.export --checkpoint=FILE.gguf --out=DIR`). Both sides run in float32.
Needs `pip install lm_eval` (not a project dependency; `pip install --no-deps lm_eval==0.4.13`
into a venv that sees the project's packages is enough for `HFLM` and the rolling windows).

- doc-PPL: the first `--documents` documents of the PTB sample (shared data), each as the text
  slm_jax scores (`eval.raw_docppl.document_text`). slm_jax: `raw_doc_ppl` (what `evaluate
  --checkpoint --tasks=docppl` runs); lm-eval: `HFLM.loglikelihood_rolling` of the same text,
  which is what its perplexity tasks (wikitext) call. Per document: |Δ log p| and the scored
  tokens (slm_jax's count; lm-eval's is the sum of its rolling windows' continuations, rebuilt
  with `lm_eval.utils.get_rolling_token_windows` on lm-eval's own encoding of the text).
  `--max_length N` sets lm-eval's `max_length` (HFLM(max_length=N)) and slm_jax's `max_context`
  (`evaluate --max_context=N`) alike, so documents longer than N tokens are scored in rolling
  windows on both sides (default: the checkpoint's max_position_embeddings on both); it
  compares doc-PPL only (`--mc_rows 0`). One row per document follows the total.
- multiple choice: the 11 tasks of the downstream fixtures (`tests/downstream_fixtures`, the
  datasets' own layouts, `--mc_rows` rows each), in both formats (`--mc_format=olmes` and
  `paper`), each with the first labeled train rows as demonstrations (the paper's fixed rows are
  row ids of the real datasets; which rows are shots does not change how a prompt is scored). slm_jax: `downstream.scoring.continuation_scores` over the
  prompts `evaluate` builds (`RawTextEncoder`); lm-eval: `HFLM.loglikelihood` of (context =
  every component but the last, joined; continuation = the last), the request its
  multiple-choice tasks make. Per option: |Δ log p| of the continuation, and per item whether
  the two pick the same option. A prompt with a token straddling the context/continuation
  boundary is counted: there the two rules may differ (`downstream/raw_text_prompts.py`).
"""

from __future__ import annotations

import json
import pathlib
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slm_jax.benchtools import parser as make_parser, shared_data_dir, table  # noqa: E402


def _lm_eval_model(folder: pathlib.Path, batch_size: int, max_length: int | None):
  from lm_eval.models.huggingface import HFLM  # pylint: disable=g-import-not-at-top
  return HFLM(pretrained=str(folder), dtype="float32", batch_size=batch_size, device="cpu",
              max_length=max_length)


def _lm_eval_tokens(lm, text: str) -> tuple[int, int]:
  """(tokens lm-eval's `loglikelihood_rolling` scores for `text`, its windows): its own windows
  of its own encoding."""
  from lm_eval import utils  # pylint: disable=g-import-not-at-top
  pairs = [utils.make_disjoint_window(w) for w in utils.get_rolling_token_windows(
      token_list=lm.tok_encode(text), prefix_token=lm.prefix_token_id,
      max_seq_len=lm.max_length, context_len=1)]
  return sum(len(continuation) for _, continuation in pairs), len(pairs)


def _requests(kind: str, arguments: list[tuple]):
  from lm_eval.api.instance import Instance  # pylint: disable=g-import-not-at-top
  return [Instance(request_type=kind, doc={}, arguments=a, idx=0) for a in arguments]


def doc_ppl_rows(run, lm, count: int, max_length: int) -> tuple[list, dict]:
  from slm_jax import ptb  # pylint: disable=g-import-not-at-top
  from slm_jax.eval.raw_docppl import document_text, raw_doc_ppl, rolling_windows
  from slm_jax.eval.raw_text import RawTextScorer
  paths = sorted((shared_data_dir() / "ptb_sample" / "combined").glob("wsj_*.mrg"))[:count]
  documents = ptb.read_documents(paths)
  if len(documents) != len(paths):
    raise SystemExit(f"{len(paths) - len(documents)} of the {len(paths)} PTB files have no trees")
  texts = [document_text(d) for d in documents]
  scorer = RawTextScorer(run.model, run.tokenizer)
  start = time.perf_counter()
  ours, _ = raw_doc_ppl(scorer, documents, max_context=max_length)
  ours_s = time.perf_counter() - start
  start = time.perf_counter()
  theirs = np.asarray(lm.loglikelihood_rolling(
      _requests("loglikelihood_rolling", [(t,) for t in texts]), disable_tqdm=True), np.float64)
  theirs_s = time.perf_counter() - start
  their_tokens, their_windows = np.array([_lm_eval_tokens(lm, t) for t in texts]).T
  our_windows = np.array([len(rolling_windows(int(n), max_length)[0]) for n in ours.doc_tokens])
  delta = np.abs(ours.doc_log_prob - theirs)
  tokens = int(ours.doc_tokens.sum())
  row = [f"doc-PPL (PTB sample, max_length {max_length})",
         f"{len(documents)} documents, {tokens} / {int(their_tokens.sum())} tokens, "
         f"{int(our_windows.sum())} / {int(their_windows.sum())} windows",
         f"{np.exp(-ours.doc_log_prob.sum() / tokens):.4f}",
         f"{np.exp(-theirs.sum() / their_tokens.sum()):.4f}", f"{delta.max():.2e}",
         f"{(delta / ours.doc_tokens).max():.2e}", "–", "–", f"{ours_s:.1f} / {theirs_s:.1f}"]
  per_document = [[f"  {path}", f"{int(n)} / {int(m)} tokens, {int(w)} / {int(v)} windows",
                   f"{a:.3f}", f"{b:.3f}", f"{abs(a - b):.2e}", f"{abs(a - b) / n:.2e}",
                   "–", "–", "–"]
                  for path, n, m, w, v, a, b in zip(
                      [p.name for p in paths],
                      ours.doc_tokens, their_tokens, our_windows, their_windows,
                      ours.doc_log_prob, theirs)]
  return [row, *per_document], {"doc_log_prob": ours.doc_log_prob.tolist(),
                                "lm_eval": theirs.tolist(), "tokens": ours.doc_tokens.tolist(),
                                "lm_eval_tokens": their_tokens.tolist()}


def mc_rows(run, lm, rows: int, batch_size: int) -> tuple[list, dict]:
  from slm_jax.downstream import paper_format, tasks as tasks_lib  # pylint: disable=g-import-not-at-top
  from slm_jax.downstream.example import MC_TASKS
  from slm_jax.downstream.raw_text_prompts import RawTextEncoder
  from slm_jax.downstream.scoring import continuation_scores, prompt_builder
  from slm_jax.eval.raw_text import RawTextScorer
  sys.path.insert(0, str(ROOT))
  from tests.downstream_fixtures import write_fixtures  # the datasets' own layouts
  scorer = RawTextScorer(run.model, run.tokenizer, batch_size=batch_size)
  table_rows, raw = [], {}
  with tempfile.TemporaryDirectory() as data:
    write_fixtures(data, rows_per_split=rows)
    for mc_format in ("olmes", "paper"):
      for task in MC_TASKS:
        folder = tasks_lib.task_folder(data, task)
        examples = tasks_lib.read_task(task, folder)
        mmlu_root = tasks_lib.task_folder(data, "mmlu") if task == "mmlu_redux" else None
        demos = tasks_lib.demonstrations(task, folder, mmlu_root=mmlu_root)
        if mc_format == "paper":
          examples = [paper_format.corrected(x) for x in examples]
        prompts, owner = [], []
        for i, example in enumerate(examples):
          own = prompt_builder(mc_format)(example, tasks_lib.shots_for(demos, example))
          prompts += own
          owner += [i] * len(own)
        encoder = RawTextEncoder(scorer.tokenizer, scorer.prefix_id)
        start = time.perf_counter()
        ours = np.array([s.full for s in continuation_scores(scorer, encoder, prompts)])
        ours_s = time.perf_counter() - start
        pairs = [("".join(p.components[:-1]), p.components[-1]) for p in prompts]
        start = time.perf_counter()
        theirs = np.array([lp for lp, _ in lm.loglikelihood(
            _requests("loglikelihood", pairs), disable_tqdm=True)])
        theirs_s = time.perf_counter() - start
        delta = np.abs(ours - theirs)
        owner_arr = np.asarray(owner)
        same = sum(int(np.argmax(ours[owner_arr == i]) == np.argmax(theirs[owner_arr == i]))
                   for i in range(len(examples)))
        table_rows.append([f"{task} ({mc_format})", f"{len(examples)} items, {len(prompts)} options",
                           "–", "–", f"{delta.max():.2e}", "–", f"{same} / {len(examples)}",
                           str(encoder.stats["straddling_tokens"]),
                           f"{ours_s:.1f} / {theirs_s:.1f}"])
        raw[f"{task}/{mc_format}"] = {"ours": ours.tolist(), "lm_eval": theirs.tolist()}
  return table_rows, raw


def main() -> None:
  parser = make_parser(__doc__)
  parser.add_argument("--checkpoint", type=pathlib.Path, required=True)
  parser.add_argument("--documents", type=int, default=8)
  parser.add_argument("--mc_rows", type=int, default=4)
  parser.add_argument("--batch_size", type=int, default=8)
  parser.add_argument("--max_length", type=int, default=None,
                      help="the context of both sides (lm-eval's max_length; default: the "
                      "checkpoint's max_position_embeddings)")
  parser.add_argument("--json", type=pathlib.Path, default=None,
                      help="also write every log-prob of both sides here")
  args = parser.parse_args()
  if args.max_length and args.mc_rows:
    parser.error("--max_length compares doc-PPL only (lm-eval would left-truncate the "
                 "multiple-choice prompts to it, slm_jax does not): add --mc_rows 0")
  from slm_jax.evaluation.checkpoints import load_checkpoint_run  # pylint: disable=g-import-not-at-top
  run = load_checkpoint_run(args.checkpoint)
  max_length = args.max_length or int(run.cfg.data.seq_len)
  lm = _lm_eval_model(args.checkpoint, args.batch_size, max_length)
  ppl_rows, ppl_raw = doc_ppl_rows(run, lm, args.documents, max_length)
  choice_rows, choice_raw = (mc_rows(run, lm, args.mc_rows, args.batch_size) if args.mc_rows
                             else ([], {}))
  import lm_eval  # pylint: disable=g-import-not-at-top
  print(table(["what", "items", "PPL slm_jax", "PPL lm-eval", "max |Δ log p|",
               "max |Δ| per token", "same choice", "straddling tokens", "s slm_jax / lm-eval"],
              ppl_rows + choice_rows))
  print(f"checkpoint {args.checkpoint}; float32 both; lm-eval {lm_eval.__version__}")
  if args.json:
    args.json.write_text(json.dumps({"doc_ppl": ppl_raw, "mc": choice_raw}) + "\n")


if __name__ == "__main__":
  main()
