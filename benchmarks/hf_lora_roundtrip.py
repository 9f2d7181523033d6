"""A checkpoint trained with LoRA, exported, and read back by transformers: the same log-probs.

  python benchmarks/hf_lora_roundtrip.py --checkpoint DIR [--out WORK] [--steps 3] [--rank 16]
      [--lr 0.01]

`DIR`: a Hugging Face checkpoint folder (a GGUF file is exported first: `python -m
slm_jax.export --checkpoint=FILE.gguf --out=DIR`). Runs, each as its CLI:
1. `main --config=hf --config.model.init_from=DIR --config.model.lora_rank=R`: `--steps` steps of
   batch 2 × 64 tokens on the embedded corpus, float32;
2. `export --workdir=RUN --out=WORK/export`: the LoRA-merged weights as a safetensors folder;
3. `score --checkpoint=RUN --ids_file`: per-token log-probs of a few sentences (the checkpoint's
   own ids after its BOS);
then transformers reads the export and the original folder (float32, eager attention) and scores
the same ids. Prints per sentence max |Δ log p| run vs export (should be float32 rounding) and run
vs the original checkpoint (how far the LoRA steps moved the model), and each stage's seconds.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slm_jax.benchtools import parser as make_parser, table  # noqa: E402

SENTENCES = ("The cats that the dog chased were hungry.",
             "Sarah discovers what some pedestrian had examined.",
             "Many people believe the report was wrong.")


def _run(*args: str) -> float:
  start = time.perf_counter()
  subprocess.run([sys.executable, "-m", *args], check=True, cwd=ROOT)
  return time.perf_counter() - start


def main() -> None:
  parser = make_parser(__doc__)
  parser.add_argument("--checkpoint", type=pathlib.Path, required=True)
  parser.add_argument("--out", type=pathlib.Path, default=None)
  parser.add_argument("--steps", type=int, default=3)
  parser.add_argument("--rank", type=int, default=16)
  parser.add_argument("--lr", type=float, default=0.01)
  args = parser.parse_args()
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  work = args.out or pathlib.Path(tempfile.mkdtemp(prefix="lora_roundtrip_"))
  run, export = work / "run", work / "export"
  folder = args.checkpoint.resolve()
  seconds = {"train": _run(
      "slm_jax.main", "--config=hf", f"--workdir={run}", f"--config.model.init_from={folder}",
      "--config.mesh.fsdp=1", f"--config.train.steps={args.steps}", "--config.train.global_batch=2",
      "--config.optimizer.grad_accum_steps=1", "--config.data.seq_len=64",
      "--config.model.param_dtype=float32", "--config.model.compute_dtype=float32",
      "--config.optimizer.warmup_steps=1", f"--config.optimizer.peak_lr={args.lr}",
      f"--config.train.checkpoint_every={args.steps}", "--config.train.eval_every=0",
      "--config.data.embedded_train_documents=40", "--config.data.embedded_eval_documents=2",
      f"--config.model.lora_rank={args.rank}")}
  seconds["export"] = _run("slm_jax.export", f"--workdir={run}", f"--out={export}")
  tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
  bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
  ids_file, scored = work / "ids.txt", work / "scored.jsonl"
  ids_file.write_text("".join(
      " ".join(map(str, bos + tokenizer(s, add_special_tokens=False)["input_ids"])) + "\n"
      for s in SENTENCES))
  seconds["score"] = _run("slm_jax.score", f"--checkpoint={run}", f"--ids_file={ids_file}",
                          f"--out={scored}")
  models = {name: transformers.AutoModelForCausalLM.from_pretrained(
      path, dtype=torch.float32, attn_implementation="eager").eval()
            for name, path in (("export", export), ("original", folder))}
  rows = []
  for sentence, record in zip(SENTENCES, map(json.loads, scored.read_text().splitlines())):
    tokens = torch.tensor([record["ids"]])
    mine = np.asarray(record["logprobs"][1:], np.float64)
    deltas = []
    for model in models.values():
      with torch.no_grad():
        logp = torch.log_softmax(model(tokens).logits[0].double(), -1)
      theirs = logp[torch.arange(tokens.shape[1] - 1), tokens[0, 1:]].numpy()
      deltas.append(f"{np.abs(mine - theirs).max():.1e}")
    rows.append([sentence, *deltas])
  print(table(["sentence", "max |Δ log p| run vs export", "max |Δ log p| run vs original"], rows))
  print(f"checkpoint {args.checkpoint}; LoRA rank {args.rank}, {args.steps} steps at lr {args.lr}; "
        + ", ".join(f"{k} {v:.0f} s" for k, v in seconds.items())
        + f"; export files: {', '.join(sorted(p.name for p in export.iterdir()))}; work {work}")


if __name__ == "__main__":
  main()
