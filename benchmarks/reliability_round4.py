"""The cases of reliability round 4 (issue #47), run by `benchmarks/reliability_cases.py` beside
those of rounds 3 and earlier: a checkpoint known by its content (B14), `export --force` over
another model (B15), a tokenizer of another model (B16), one input line one record and two
checkpoints of one file name (B17, B18), a full disk in training, fine-tuning and evaluation
(W25a–c, on a real tmpfs: needs root), BLiMP resumed (W26), every checkpoint checked first (W27),
a 100,000-character line (W28), and the rest of round 3's WEAK list (W29a–d).

Fixtures written here (by this checkout's `tests/gguf_fixtures.py`, the same files for every
tree under test): two tiny GGUF models of one vocabulary (`gguf/seed0.gguf`, `seed1.gguf`), the
same two under one file name in two folders (`ga/model.gguf`, `gb/model.gguf`), a safetensors
folder of seed1 re-written as shards with an index (`exp_old`, "another model's folder"), a cut
GGUF file, three SyntaxGym suites and three BLiMP paradigms from the shared data (a few items
each), and the text inputs.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parents[1]
IDS = ("B14", "B15", "B16", "B17", "B18", "W25a", "W25b", "W25c", "W26", "W27", "W28", "W29a",
       "W29b", "W29c", "W29d")
SERIAL = {}  # every round-4 case writes only its own files
FIXTURES = {"gguf": ()}
EXPORTED = ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
            "tokenizer_config.json"]
FT = ["--task=boolq", "--seeds=42", "--epochs=1", "--batch_size=4", "--max_len=128",
      "--tree_source=flat", "--warmup_steps=0"]

GGUF_SCRIPT = """
import pathlib, shutil, sys
sys.path.insert(0, {here!r})
from tests.gguf_fixtures import byte_level_vocab, write_model
from tests.test_hf_import import make_hf_model
from slm_jax.hf.gguf_export import export_gguf
from slm_jax.hf.safetensors_io import CheckpointFiles, write_checkpoint
w = pathlib.Path({work!r})
vocab = byte_level_vocab()
for seed in (0, 1):
  model = make_hf_model("qwen2", seed=seed, vocab_size=len(vocab["tokens"]),
                        tie_word_embeddings=True)
  write_model(w / "gguf" / f"seed{{seed}}.gguf", "qwen2", model, {{}}, tokenizer=vocab)
for folder, seed in (("ga", 0), ("gb", 1)):
  (w / folder).mkdir(exist_ok=True)
  shutil.copy(w / "gguf" / f"seed{{seed}}.gguf", w / folder / "model.gguf")
old = export_gguf(w / "gguf" / "seed1.gguf", w / "exp_old", force=True)
files = CheckpointFiles(old)
tensors = {{name: files.read(name) for name in files.tensors}}
(old / "model.safetensors").unlink()
write_checkpoint(old, tensors, max_shard_bytes=60_000)  # another model's sharded folder
data = (w / "gguf" / "seed0.gguf").read_bytes()
(w / "corrupt.gguf").write_bytes(data[:3000])  # cut inside its metadata
"""

# evaluate through cli.run, ending the process (as kill -9 would) when a condition is met:
# KILL=sg:N after N SG suites were kept; KILL=sentences:N before BLiMP scores past N sentences;
# with COUNT=1 it prints how many BLiMP sentences it scored.
EVALUATE = """
import os, sys
from slm_jax import cli, evaluate
from slm_jax.eval import raw_text, sg_partial
kill, count = os.environ.get("KILL", ""), os.environ.get("COUNT")
what, _, limit = kill.partition(":")
scored = [0]
if what == "sg":
  real_keep = sg_partial.SuitesInFlight.keep
  def keep(self, name, result):
    real_keep(self, name, result)
    if len(self.done) >= int(limit):
      os._exit(137)
  sg_partial.SuitesInFlight.keep = keep
real = raw_text.RawTextScorer.text_log_probs
def text_log_probs(self, texts, *args, **kwargs):
  if what == "sentences" and scored[0] + len(texts) > int(limit):
    os._exit(137)
  scored[0] += len(texts)
  return real(self, texts, *args, **kwargs)
raw_text.RawTextScorer.text_log_probs = text_log_probs
code = cli.run(evaluate.main, sys.argv[1:])
if count:
  print(f"SCORED {scored[0]}", flush=True)
sys.exit(code)
"""

# A span cached for 32 token ids that ends at 999 (issue #47 item 9), read back through cli.run.
SPAN_PAST_ROW = """
import sqlite3, sys
from slm_jax import cli
from slm_jax.gtca import parse_cache as pc
path = sys.argv[1]
ids = list(range(5, 37))
pc.ParseCache(path, {"tokenizer": "t"}, writable=True).close()
with sqlite3.connect(path) as db:
  db.execute("INSERT INTO spans VALUES (?, ?)", (pc.cache_key(ids), '{"v": 1, "n": 32, '
             '"masked": [], "nodes": [["S", 0, 32, 1], ["NP", 3, 999, 0]]}'))

def main(_):
  with pc.ParseCache(path, {"tokenizer": "t"}) as cache:
    found = cache.get(ids, example="ex-1")
  print(f"accepted: a span tree of 32 ids with a node ending at "
        f"{max(n.end for n in found.nodes())}")

sys.exit(cli.run(main))
"""


# A line of an error report on stderr: ours, a traceback's head or exception line, absl's or
# Orbax's error records, round 3's late-write warnings.
ERROR_LINE = re.compile(r"^(error:|Traceback|Exception|ERROR|E\d{4} |[A-Za-z_.]*Error: |"
                        r"warning: a checkpoint write finished)")


def error_lines(err: str) -> list[str]:
  return [line for line in err.splitlines() if ERROR_LINE.match(line)]


def shared(data: pathlib.Path, kind: str) -> list[pathlib.Path]:
  if kind == "blimp":
    return sorted((data / "blimp").glob("*.jsonl"))[:3]
  return [p for p in sorted((data / "syntaxgym" / "json").glob("*.json"))
          if p.name != "circuits.json"][:3]


def write_files(w: pathlib.Path, data: pathlib.Path) -> None:
  """The plain-file fixtures of round 4."""
  blimp = w / "blimp_small"
  blimp.mkdir(exist_ok=True)
  for path in shared(data, "blimp"):
    (blimp / path.name).write_text("".join(path.read_text().splitlines(True)[:4]))
  sg = w / "sg3"
  sg.mkdir(exist_ok=True)
  for path in shared(data, "sg"):
    shutil.copy(path, sg / path.name)
  (w / "separators.txt").write_text("the cat\u2028sat\x85on the mat\x0c.\nthe dog\n")
  (w / "long_line.txt").write_text(("the cat sat on the mat " * 4348)[:100_000] + "\n")
  (w / "latin1.jsonl").write_bytes(json.dumps({"id": "s0", "sentence": "The cat sat .",
                                               "tree": "(S (NP The cat) (VP sat) .)"}).encode()
                                   + b"\n" + '{"id": "s1", "sentence": "Caf\xe9 au lait ."}'
                                   .encode("latin-1") + b"\n")


def write_gguf(w: pathlib.Path, failed: dict) -> None:
  (w / "gguf").mkdir(exist_ok=True)
  done = subprocess.run([sys.executable, "-c", GGUF_SCRIPT.format(here=str(HERE), work=str(w))],
                        capture_output=True, text=True, cwd=HERE,
                        env={**os.environ, "PYTHONPATH": str(HERE), "JAX_PLATFORMS": "cpu"})
  if done.returncode:
    failed["gguf"] = (done.stderr.strip().splitlines() or ["?"])[-1]


def cases(w: pathlib.Path) -> list[tuple[str, str, list[str], tuple[str, ...]]]:
  sg = ",".join(p.stem for p in sorted((w / "sg3").glob("*.json")))
  blimp = [f"--blimp_dir={w}/blimp_small", "--bootstrap_resamples=10"]
  return [
      ("B14", "evaluate --checkpoint: SG killed after 2 suites, then another model at that path",
       ["slm_jax.evaluate", f"--checkpoint={w}/b14/model.gguf", "--tasks=sg",
        f"--syntaxgym_dir={w}/sg3", f"--sg_suites={sg}", "--max_items=2",
        "--bootstrap_resamples=10", f"--out={w}/ev_b14"], ("gguf",)),
      ("B15", "export --force over another model's sharded folder",
       ["slm_jax.export", f"--checkpoint={w}/gguf/seed0.gguf", f"--out={w}/exp_b15", "--force"],
       ("gguf",)),
      ("B16", "main --config=hf from a GGUF file with another model's tokenizer.json",
       ["slm_jax.main", "--config=hf", f"--config.model.init_from={w}/gguf/seed0.gguf",
        f"--config.data.tokenizer_path={w}/hf/tokenizer.json", "--config.mesh.fsdp=1",
        "--config.train.steps=1", "--config.train.global_batch=2",
        "--config.optimizer.grad_accum_steps=1", "--config.data.seq_len=32",
        "--config.model.param_dtype=float32", "--config.model.compute_dtype=float32",
        "--config.train.eval_every=0", "--config.data.embedded_train_documents=8",
        "--config.data.embedded_eval_documents=2", "--config.model.lora_rank=2",
        f"--workdir={w}/b16"], ("gguf", "hf")),
      ("B17", "score: lines holding \\u2028, \\x85 and \\x0c (2 lines)",
       ["slm_jax.score", f"--checkpoint={w}/hf", f"--text_file={w}/separators.txt",
        f"--out={w}/sep.jsonl"], ("hf",)),
      ("B18", "evaluate: two checkpoints of one file name (a/model.gguf, b/model.gguf)",
       ["slm_jax.evaluate", f"--checkpoint={w}/ga/model.gguf", f"--checkpoint={w}/gb/model.gguf",
        "--tasks=blimp", *blimp, f"--out={w}/ev_b18"], ("gguf",)),
      ("W25a", "main: a full disk (tmpfs of 150 kB) during training",
       ["slm_jax.main", "--config=configs/tgtree_tiny.py", "--config.train.steps=6",
        "--config.train.checkpoint_every=2", "--config.data.embedded_train_documents=120",
        "--config.data.embedded_eval_documents=12", "--config.data.seq_len=128",
        "--config.model.d_model=64", "--config.model.n_layers=1", "--config.model.n_heads=4",
        "--config.train.global_batch=8", "--config.train.log_every=1",
        "--config.train.eval_every=0", f"--workdir={w}/full_w25a/run"], ()),
      ("W25b", "finetune: a full disk (tmpfs of 300 kB) in the seed folder",
       ["slm_jax.finetune", f"--workdir={w}/run", f"--out={w}/full_w25b/ft", *FT,
        f"--data_dir={w}/tasks/boolq"], ("run",)),
      ("W25c", "evaluate: a full disk (tmpfs of 12 kB) in --out",
       ["slm_jax.evaluate", f"--workdir={w}/run", "--tasks=docppl", "--docppl_documents=2",
        f"--out={w}/full_w25c/ev"], ("run",)),
      ("W26", "evaluate --checkpoint --tasks=blimp killed after 16 of 24 sentences, rerun",
       ["slm_jax.evaluate", f"--checkpoint={w}/gguf/seed0.gguf", "--tasks=blimp", *blimp,
        f"--out={w}/ev_w26"], ("gguf",)),
      ("W27", "evaluate --workdir=RUN --checkpoint=corrupt.gguf",
       ["slm_jax.evaluate", f"--workdir={w}/run", f"--checkpoint={w}/corrupt.gguf",
        "--tasks=blimp", *blimp, f"--out={w}/ev_w27"], ("run", "gguf")),
      ("W28", "score: one line of 100,000 characters",
       ["slm_jax.score", f"--checkpoint={w}/hf", f"--text_file={w}/long_line.txt",
        f"--out={w}/long_line.jsonl"], ("hf",)),
      ("W29a", "gtca.cache --data with Latin-1 bytes (line 2)",
       ["slm_jax.gtca.cache", f"--data={w}/latin1.jsonl", f"--backbone={w}/hf/tokenizer.json",
        f"--out={w}/w29a.sqlite"], ("hf",)),
      ("W29b", "a cached span that ends at 999 in a 32-token row", ["(cache)"], ()),
      ("W29c", "export of a run trained at 128 tokens: max_position_embeddings",
       ["slm_jax.export", f"--workdir={w}/run", f"--out={w}/exp_w29c", "--force"], ("run",)),
      ("W29d", "the old module path python -m slm_jax.hf.export",
       ["slm_jax.hf.export", f"--workdir={w}/run", f"--out={w}/exp_w29d"], ("run",)),
  ]


def _tmpfs(folder: pathlib.Path, size: str) -> str | None:
  """Mounts a tmpfs of `size` at `folder` (None), or says why not."""
  shutil.rmtree(folder, ignore_errors=True)
  folder.mkdir(parents=True)
  done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                        capture_output=True, text=True)
  return None if done.returncode == 0 else f"no tmpfs: {done.stderr.strip() or 'mount failed'}"


def _leftovers(folder: pathlib.Path) -> str:
  """0-byte files and temporaries (`*.tmp`, `*.partial`, `.NAME.partial-PID`) left in `folder`."""
  found = [p for p in folder.rglob("*") if p.is_file() and (
      p.stat().st_size == 0 or p.name.endswith((".tmp", ".partial")) or ".partial-" in p.name)]
  return ", ".join(sorted(str(p.relative_to(folder)) for p in found)) or "none"


def run_case(r, ident: str, command: list[str]) -> tuple[str, int, str, str, str]:
  """(command shown, exit code, stdout, stderr, note) of round-4 case `ident`."""
  w = r.work
  note = ""
  shown = " ".join([command[0].removeprefix("slm_jax."), *command[1:]]).replace(str(w), "$F")
  if ident == "B14":
    path = w / "b14" / "model.gguf"
    path.parent.mkdir(exist_ok=True)
    shutil.rmtree(w / "ev_b14", ignore_errors=True)
    shutil.copy(w / "gguf" / "seed0.gguf", path)
    killed = r.code(EVALUATE, *command[1:], env={"KILL": "sg:2"})
    shutil.copy(w / "gguf" / "seed1.gguf", path)  # another model put at the same path
    code, out, err = r.run(*command)
    results = w / "ev_b14" / "results.json"
    if results.exists():
      counts = json.loads(results.read_text())["models"][0]["sg"].get("counts") or {}
      note = (f"first run ended {killed[0]}; {counts.get('reused_suites')} of 3 suites reused "
              "from the model that was there before")
    shown += " (the first run killed after 2 suites, then seed1 copied over seed0)"
  elif ident == "B15":
    shutil.rmtree(w / "exp_b15", ignore_errors=True)
    shutil.copytree(w / "exp_old", w / "exp_b15")
    code, out, err = r.run(*command)
    left = sorted(set(os.listdir(w / "exp_b15")) - set(EXPORTED)) if (
        w / "exp_b15").is_dir() else []
    note = f"left of the old folder: {', '.join(left) or 'nothing'}"
  elif ident == "B16":
    shutil.rmtree(w / "b16", ignore_errors=True)
    code, out, err = r.run(*command, timeout=900)
    vocab = [line for line in out.splitlines() if line.startswith("model:")]
    note = vocab[0].split("), ")[-1] if vocab else ""
  elif ident == "B17":
    code, out, err = r.run(*command)
    sink = w / "sep.jsonl"
    note = f"{len(sink.read_text().splitlines()) if sink.exists() else 0} records for 2 lines"
  elif ident == "B18":
    shutil.rmtree(w / "ev_b18", ignore_errors=True)
    code, out, err = r.run(*command)
    results = w / "ev_b18" / "results.json"
    if results.exists():
      saved = json.loads(results.read_text())
      names = [m["name"] for m in saved["models"]]
      booted = sorted(saved.get("bootstrap", {}).get("blimp", {}).get("models", {}))
      note = f"names {names}; bootstrap models {booted}"
  elif ident in ("W25a", "W25b", "W25c"):
    folder = w / f"full_{ident.lower()}"
    why = _tmpfs(folder, {"W25a": "150k", "W25b": "300k", "W25c": "12k"}[ident])
    if why:
      return shown, -1, "", why, why
    try:
      code, out, err = r.run(*command, timeout=900)
      note = (f"{len(error_lines(err))} error lines of {len(err.splitlines())} lines on stderr; "
              f"0-byte or temporary files left: {_leftovers(folder)}")
    finally:
      subprocess.run(["umount", str(folder)], check=False)
  elif ident == "W26":
    shutil.rmtree(w / "ev_w26", ignore_errors=True)
    killed = r.code(EVALUATE, *command[1:], env={"KILL": "sentences:16"})
    code, out, err = r.code(EVALUATE, *command[1:], env={"COUNT": "1"})
    scored = [line.split()[1] for line in out.splitlines() if line.startswith("SCORED ")]
    out = "\n".join(line for line in out.splitlines() if not line.startswith("SCORED "))
    note = (f"first run ended {killed[0]}; the rerun scored {scored[0] if scored else '?'} of "
            "24 sentences")
    shown += " (killed before scoring past 16 of 24 sentences, then the same command)"
  elif ident == "W27":
    shutil.rmtree(w / "ev_w27", ignore_errors=True)
    code, out, err = r.run(*command)
    note = "RUN scored first" if f"{w}/run: " in err else "nothing scored"
  elif ident == "W28":
    code, out, err = r.run(*command, timeout=900)
  elif ident == "W29b":
    (w / "w29b.sqlite").unlink(missing_ok=True)
    code, out, err = r.code(SPAN_PAST_ROW, str(w / "w29b.sqlite"))
    shown = "ParseCache(FILE).get(32 ids) of a record whose node NP spans [3, 999)"
  elif ident == "W29c":
    code, out, err = r.run(*command)
    config = w / "exp_w29c" / "config.json"
    if config.exists():
      note = (f"max_position_embeddings {json.loads(config.read_text())['max_position_embeddings']}"
              " (trained at 128)")
  elif ident == "W29d":
    shutil.rmtree(w / "exp_w29d", ignore_errors=True)
    code, out, err = r.run(*command)
    note = f"{w / 'exp_w29d'} {'written' if (w / 'exp_w29d').exists() else 'not written'}"
    note = note.replace(str(w), "$F")
  else:
    code, out, err = r.run(*command)
  return shown, code, out, err, note
