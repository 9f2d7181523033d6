"""The reliability cases of issues #32 and #47 as a before/after table: each case run as a
subprocess of `python -m …` against the slm_jax tree `--tree=DIR` (PYTHONPATH=DIR), printed as
Markdown: case, command, exit code, first line of the message; then how many cases printed a
traceback or more than one error line on stderr (`reliability_round4.error_lines`). Round 4's
cases and fixtures (B14–B18, W25–W29) are in `reliability_round4.py`.

  python benchmarks/reliability_cases.py --tree=/work/baseline > before.md
  python benchmarks/reliability_cases.py --tree=.               > after.md
      [--work=DIR] [--only=B1,W3,…]

Fixtures are built in a temporary folder (or `--work`): the slm_jax ones by the tree under test
(a tiny tgtree run trained 2 steps, a BoolQ fine-tune of it, a tiny parser), the plain files by
this script (BoolQ rows, SyntaxGym suites copied from the shared data with one made item-less, a
tiny Hugging Face folder, inputs with invalid UTF-8). The message shown is the first `error:`
line (or, for exit 0, the first `warning:` line, else the last line printed); paths under the
fixture folder read `$F`. A case whose fixture could not be built says so. Most of the time is
the fixtures (tiny trainings, two fine-tunes, a parser, a GTCA run) and the evaluations, so: only
the fixtures the chosen cases need are built (`--only`), independent ones side by side, every
subprocess shares one persistent JAX compilation cache (`$F/jax_cache`: the second process of
one model shape compiles nothing), and `--jobs=N` runs the cases that only read the shared
fixtures N at a time (the concurrency cases B5 and B6 always run alone, first). `--reuse`
reruns cases on fixtures built earlier.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent import futures

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import reliability_round4 as round4  # noqa: E402  # pylint: disable=g-import-not-at-top

HERE = pathlib.Path(__file__).resolve().parents[1]
PYTHON = sys.executable
SMALL = ["--config.data.embedded_train_documents=120", "--config.data.embedded_eval_documents=12",
         "--config.data.seq_len=128", "--config.model.d_model=64", "--config.model.n_layers=1",
         "--config.model.n_heads=4", "--config.train.global_batch=8", "--config.train.log_every=1",
         "--config.train.eval_every=0", "--config.optimizer.warmup_steps=3",
         "--config.optimizer.peak_lr=0.01"]
TREES = ("(S (NP the dog) (VP barked (PP at (NP the cat))) .)\n(S (NP a bird) (VP sang))\n"
         "(S (VP Go (ADVP home)) !)\n(NP (NP dogs) and (NP cats))\n"
         "(S (NP he) (VP saw (NP the bird) (PP in (NP trees))))\n") * 3


class Runner:
  """Runs `python -m MODULE …` of the tree under test in its root, with its PYTHONPATH."""

  def __init__(self, tree: pathlib.Path, work: pathlib.Path):
    self.tree, self.work = tree, work
    self.env = {**os.environ, "PYTHONPATH": str(tree), "JAX_PLATFORMS": "cpu",
                "SLM_JAX_SHARED_DATA": str(shared_data()),
                "JAX_COMPILATION_CACHE_DIR": str(work / "jax_cache"),
                "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}

  def args(self, module: str, *args: str) -> list[str]:
    return [PYTHON, "-m", module, *args]

  def popen(self, module: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(self.args(module, *args), cwd=self.tree, env=self.env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)

  def run(self, module: str, *args: str, timeout: int = 300):
    try:
      done = subprocess.run(self.args(module, *args), cwd=self.tree, env=self.env, text=True,
                            capture_output=True, timeout=timeout)
      return done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired:
      return 124, "", f"timed out after {timeout} s"

  def code(self, script: str, *args: str, timeout: int = 300, env: dict | None = None):
    try:
      done = subprocess.run([PYTHON, "-c", script, *args], cwd=self.tree,
                            env={**self.env, **(env or {})}, text=True, capture_output=True,
                            timeout=timeout)
      return done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired:
      return 124, "", f"timed out after {timeout} s (the process did not end)"


def shared_data() -> pathlib.Path:
  for base in (HERE, *HERE.parents):
    if (base.parent / "shared" / "data").is_dir():
      return base.parent / "shared" / "data"
  raise SystemExit("error: the shared data folder (../shared/data) was not found")


def message(code: int, out: str, err: str, work: pathlib.Path) -> str:
  """The first error line (exit ≠ 0) or warning line (exit 0), else the last line printed."""
  lines = [l.strip() for l in (err + "\n" + out).splitlines() if l.strip()]
  noise = ("WARNING:", "W0", "I0", "E0", "Writing model", "warnings.warn")
  picked = [l for l in lines if l.startswith("error:")] if code else []
  picked = picked or [l for l in lines if l.startswith("warning:")]
  picked = picked or [l for l in lines if l.startswith("Traceback")]
  picked = picked or [l for l in reversed(lines) if not l.startswith(noise)]
  text = picked[0] if picked else ""
  if code and not text.startswith("error:") and "Traceback" in err:
    text = f"Traceback ({err.count(chr(10))} lines): {err.strip().splitlines()[-1]}"
  text = text.replace(str(work), "$F").replace("|", "\\|")
  return text[:170] + ("…" if len(text) > 170 else "")


# ---- fixtures --------------------------------------------------------------------------------
def write_boolq(folder: pathlib.Path, train: str | bytes | None = None, rows: int = 8) -> None:
  (folder / "data").mkdir(parents=True, exist_ok=True)
  lines = "".join(json.dumps({"question": f"is the cat {i} here", "passage": "the cat is here .",
                              "answer": i % 2 == 0}) + "\n" for i in range(rows))
  (folder / "data" / "validation.jsonl").write_text(lines)
  if isinstance(train, bytes):
    (folder / "data" / "train.jsonl").write_bytes(train)
  else:
    (folder / "data" / "train.jsonl").write_text(lines if train is None else train)


# case → the fixture it may write (or lock): such cases run one after another
SERIAL = {"B1": "ft", "B3": "ft", "B4": "ft", "B8": "parser", "W13": "parser", "B7": "gtca",
          "W15": "gtca", "W20": "ft", **round4.SERIAL}
# fixture → the fixtures it needs built first
FIXTURES = {"run": (), "ft": ("run",), "ft_other": ("run",), "gtca": ("run",), "parser": (),
            "hf": (), **round4.FIXTURES}
GTCA = ["--stage_steps=2,2,2", "--batch_size=4", "--train_items=16", "--dev_items=4",
        "--test_items=8", "--log_every=1"]


def build_fixtures(r: Runner, needed: set[str]) -> dict[str, str]:
  """Builds the fixtures in `needed` (and what they need) plus the plain files; independent
  chains side by side; returns fixture → problem for those that failed."""
  w, failed = r.work, {}
  data = w / "tasks"
  ft = ["--task=boolq", "--seeds=42", "--epochs=1", "--batch_size=4", "--max_len=128",
        "--tree_source=flat", "--warmup_steps=0", f"--data_dir={data}/boolq"]
  commands = {
      "run": ["slm_jax.main", "--config=configs/tgtree_tiny.py", "--config.train.steps=2",
              "--config.train.checkpoint_every=2", *SMALL, f"--workdir={w}/run"],
      "ft": ["slm_jax.finetune", f"--workdir={w}/run", f"--out={w}/ft", "--lr=3e-4", *ft],
      "ft_other": ["slm_jax.finetune", f"--workdir={w}/run", f"--out={w}/ft_other",
                   "--lr=3e-3", *ft],
      "gtca": ["slm_jax.gtca.train", f"--backbone={w}/run", f"--out={w}/gtca", *GTCA],
      "parser": ["slm_jax.parser.train", f"--workdir={w}/parser", "--config=tiny",
                 f"--train={w}/treebank.mrg", f"--dev={w}/treebank.mrg", "--max_epochs=1",
                 "--members=1"],
  }
  for name in list(needed):
    needed |= set(FIXTURES.get(name, ()))

  def build(name):
    if any(n in failed for n in FIXTURES[name]):
      failed[name] = f"needs {FIXTURES[name][0]}"
      return
    if name == "hf":
      write_hf(w, failed)
      return
    if name == "gguf":
      round4.write_gguf(w, failed)
      return
    code, out, err = r.run(*commands[name], timeout=900)
    if code:
      failed[name] = message(code, out, err, w)
      print(f"fixture {name} failed: {failed[name]}", file=sys.stderr)
    elif name == "run":
      shutil.copytree(w / "run", w / "run2")

  def chain(names):
    for name in names:
      if name in needed:
        build(name)

  started = time.time()
  write_files(w)
  with futures.ThreadPoolExecutor(3) as pool:
    list(pool.map(chain, (["run", "ft", "ft_other", "gtca"], ["parser"], ["hf", "gguf"])))
  print(f"fixtures {sorted(needed)} built in {time.time() - started:.0f} s", file=sys.stderr)
  return failed


def write_files(w: pathlib.Path) -> None:
  """The plain-file fixtures (BoolQ rows, SyntaxGym suites, treebanks, broken inputs)."""
  data = w / "tasks"
  write_boolq(data / "boolq")
  (w / "treebank.mrg").write_text(TREES)
  (w / "treebank2.mrg").write_text(TREES.replace("dog", "fox"))
  sg = w / "sg"
  sg.mkdir(exist_ok=True)
  suites = sorted((shared_data() / "syntaxgym" / "json").glob("*.json"))
  suites = [p for p in suites if p.name != "circuits.json"][:2]
  for path in suites:
    shutil.copy(path, sg / path.name)
  broken = json.loads((sg / suites[1].name).read_text())
  broken.pop("items")
  (sg / suites[1].name).write_text(json.dumps(broken))
  (w / "sg_names").write_text(",".join(p.stem for p in suites))
  (w / "bad_utf8.txt").write_bytes(b"the cat sat\nthe \xff mat\n")
  (w / "paren.txt").write_text("the cat sat\nthe (cat) sat\n")
  (w / "doc.txt").write_text("The cat sat on the mat. The dog barked.\n")
  write_boolq(data / "boolq_bad_utf8", train=b'{"question": "is \xff", "passage": "p"}\n')
  write_boolq(data / "boolq_no_answer", train=json.dumps({"question": "q", "passage": "p"}) + "\n")
  write_boolq(data / "boolq_empty", train="\n")
  (w / "a_file").write_text("x")
  (w / "a_folder.sqlite").mkdir(exist_ok=True)
  (w / "gcache_empty.jsonl").write_text("")
  write_boolq(w / "tasks_empty" / "boolq")
  (w / "tasks_empty" / "boolq" / "data" / "validation.jsonl").write_text("")
  (w / "gcache.jsonl").write_text(json.dumps({
      "id": "s1", "sentence": "The cat sat .", "tree": "(S (NP The cat) (VP sat) .)"}) + "\n")
  round4.write_files(w, shared_data())


def write_hf(w: pathlib.Path, failed: dict) -> None:
  """A tiny HF folder (qwen2, random weights) and a copy whose tokenizer.json has more tokens
  than config.json's vocab_size (another model's tokenizer)."""
  script = f"""
import sys, json, pathlib, tokenizers
sys.path.insert(0, {str(HERE)!r})
from tests.test_hf_import import make_hf_model, tiny_tokenizer
path = pathlib.Path({str(w / 'hf')!r})
make_hf_model('qwen2', tie_word_embeddings=True).save_pretrained(path)
tiny_tokenizer().save_pretrained(path)
"""
  done = subprocess.run([PYTHON, "-c", script], capture_output=True, text=True, cwd=HERE,
                        env={**os.environ, "PYTHONPATH": str(HERE)})
  if done.returncode:
    failed["hf"] = done.stderr.strip().splitlines()[-1]
    return
  import tokenizers  # pylint: disable=g-import-not-at-top
  shutil.copytree(w / "hf", w / "hf_other_tokenizer")
  vocab = json.loads((w / "hf" / "config.json").read_text())["vocab_size"]
  tok = tokenizers.Tokenizer.from_file(str(w / "hf" / "tokenizer.json"))
  tok.add_tokens([f"extra{i}" for i in range(vocab - tok.get_vocab_size(True) + 5)])
  tok.save(str(w / "hf_other_tokenizer" / "tokenizer.json"))
  (w / "long_ids.txt").write_text(" ".join(["5"] * 300) + "\n5 6\n")


# ---- cases -----------------------------------------------------------------------------------
def cases(w: pathlib.Path) -> list[tuple[str, str, list[str], tuple[str, ...]]]:
  """(id, what, command after `python -m`, fixtures it needs)."""
  ft = ["--task=boolq", "--seeds=42", "--epochs=1", "--batch_size=4", "--max_len=128",
        "--tree_source=flat", "--warmup_steps=0"]
  boolq = ["--tasks=boolq", f"--downstream_dir={w}/tasks", "--max_items=2", "--tree_source=flat"]
  sg_names = (w / "sg_names").read_text() if (w / "sg_names").exists() else "a,b"
  return [
      ("B1", "finetune: a finished seed, other settings (--lr)",
       ["slm_jax.finetune", f"--workdir={w}/run", f"--out={w}/ft", "--lr=1e-3", *ft,
        f"--data_dir={w}/tasks/boolq"], ("ft",)),
      ("B3", "evaluate: --boolq_finetuned is a fine-tune of another run",
       ["slm_jax.evaluate", f"--workdir={w}/run2", *boolq, f"--boolq_finetuned={w}/ft",
        f"--out={w}/ev3"], ("ft",)),
      ("B4", "evaluate: items of --out reused under another checkpoint",
       ["slm_jax.evaluate", f"--workdir={w}/run", *boolq, f"--boolq_finetuned={w}/ft_other",
        f"--out={w}/ev4"], ("ft", "ft_other")),  # after the same with ft (run_case)
      ("B5", "two trainers on one workdir within a second", ["(concurrent)"], ("run",)),
      ("B6", "two evaluations into one --out at once", ["(concurrent)"], ("run",)),
      ("B8", "parser.train: a finished workdir, other data",
       ["slm_jax.parser.train", f"--workdir={w}/parser", "--config=tiny",
        f"--train={w}/treebank2.mrg", f"--dev={w}/treebank2.mrg", "--max_epochs=1",
        "--members=1"], ("parser",)),
      ("B10", "score: tokenizer.json of another model (vocab size)",
       ["slm_jax.score", f"--checkpoint={w}/hf_other_tokenizer", f"--text_file={w}/doc.txt"],
       ("hf",)),
      ("B11", "evaluate sg: a suite without \"items\"",
       ["slm_jax.evaluate", f"--workdir={w}/run", "--tasks=sg", f"--syntaxgym_dir={w}/sg",
        f"--sg_suites={sg_names}", "--max_items=1", "--beam=4", f"--out={w}/ev11"], ("run",)),
      ("B13", "main: a partial last line in metrics.jsonl", ["(resume)"], ("run",)),
      ("W1", "main --workdir=FILE",
       ["slm_jax.main", "--config=configs/tgtree_tiny.py", *SMALL[:3], f"--workdir={w}/a_file"],
       ()),
      ("W2", "score --text_file=DIR",
       ["slm_jax.score", f"--checkpoint={w}/hf", f"--text_file={w}/sg"], ("hf",)),
      ("W3", "score: non-UTF-8 --text_file",
       ["slm_jax.score", f"--checkpoint={w}/hf", f"--text_file={w}/bad_utf8.txt"], ("hf",)),
      ("W4", "score --fsdp past the devices",
       ["slm_jax.score", f"--checkpoint={w}/hf", f"--text_file={w}/doc.txt", "--fsdp=64"],
       ("hf",)),
      ("W5", "score: 300 tokens, model trained on 256",
       ["slm_jax.score", f"--checkpoint={w}/hf", f"--ids_file={w}/long_ids.txt",
        f"--out={w}/long.jsonl"], ("hf",)),
      ("W6", "score --ids-file (dashed, mutually exclusive group)",
       ["slm_jax.score", f"--checkpoint={w}/hf", f"--ids-file={w}/long_ids.txt",
        f"--out={w}/long2.jsonl"], ("hf",)),
      ("W7", "finetune: non-UTF-8 train split",
       ["slm_jax.finetune", f"--workdir={w}/run", f"--out={w}/ft_w7", *ft,
        f"--data_dir={w}/tasks/boolq_bad_utf8"], ("run",)),
      ("W8", "finetune: a BoolQ row without answer",
       ["slm_jax.finetune", f"--workdir={w}/run", f"--out={w}/ft_w8", *ft,
        f"--data_dir={w}/tasks/boolq_no_answer"], ("run",)),
      ("W9", "finetune: an empty train split",
       ["slm_jax.finetune", f"--workdir={w}/run", f"--out={w}/ft_w9", *ft,
        f"--data_dir={w}/tasks/boolq_empty"], ("run",)),
      ("W10", "parser.parse: non-UTF-8 input",
       ["slm_jax.parser.parse", f"{w}/bad_utf8.txt"], ()),
      ("W11", "parser.parse --pretokenized with a '('",
       ["slm_jax.parser.parse", f"{w}/paren.txt", "--pretokenized"], ()),
      ("W12", "parse: another --backend into a finished output", ["(two runs)"], ()),
      ("W13", "parser.train: a workdir of another --encoder",
       ["slm_jax.parser.train", f"--workdir={w}/parser", "--config=tiny",
        f"--train={w}/treebank.mrg", f"--dev={w}/treebank.mrg", "--max_epochs=1",
        "--members=1", "--encoder=transformer"], ("parser",)),
      ("W14", "beam_pipelines --help without apache_beam", ["(no extra)"], ()),
      ("B7", "gtca.train: a run's stages resumed under another --lr (result.json removed)",
       ["(resume)"], ("gtca",)),
      ("W15", "gtca.train: a finished run, another --lr",
       ["slm_jax.gtca.train", f"--backbone={w}/run", f"--out={w}/gtca", *GTCA, "--lr=2e-3"],
       ("gtca",)),
      ("B9", "gtca.cache --out is a folder",
       ["slm_jax.gtca.cache", f"--data={w}/gcache.jsonl", f"--backbone={w}/hf/tokenizer.json",
        f"--out={w}/a_folder.sqlite"], ("hf",)),
      ("B12", "gtca.train: a backbone without the option letters (A → ▁ <unk>)",
       ["slm_jax.gtca.train", f"--backbone={w}/hf", f"--out={w}/gtca12",
        "--stage_steps=1,1,1", *GTCA[1:]], ("hf",)),
      ("W16", "a malformed span tree in the GTCA parse cache", ["(cache)"], ()),
      ("W17", "a full disk during a checkpoint save (Orbax's writes fail: ENOSPC)",
       ["(checkpointer)"], ()),
      ("W18", "Ctrl-C inside a checkpoint save", ["(checkpointer)"], ()),
      ("W19", "beam_pipelines parse: another --backend into a finished output", ["(two runs)"],
       ()),
      ("B2", "finetune: the loss turns NaN at a step that is not a log step (--lr=1e30)",
       ["slm_jax.finetune", f"--workdir={w}/run", f"--out={w}/ft_b2", "--lr=1e30", *ft[:2],
        "--epochs=3", *ft[3:], "--log_every=100", "--checkpoint_every=1",
        f"--data_dir={w}/tasks/boolq"], ("run",)),
      ("G1", "kill -9 of a trainer with Grain worker processes", ["(kill)"], ()),
      ("W20", "evaluate boolq: an empty validation split",
       ["slm_jax.evaluate", f"--workdir={w}/run", "--tasks=boolq",
        f"--downstream_dir={w}/tasks_empty", "--tree_source=flat", f"--boolq_finetuned={w}/ft",
        f"--out={w}/ev20"], ("ft",)),
      ("W21", "gtca.cache: empty --data",
       ["slm_jax.gtca.cache", f"--data={w}/gcache_empty.jsonl",
        f"--backbone={w}/hf/tokenizer.json", f"--out={w}/empty.sqlite"], ("hf",)),
      ("W22", "tfds_build without tensorflow_datasets", ["(no extra)"], ()),
      ("W23", "a full disk while evaluate rewrites results.partial.json (ENOSPC)",
       ["(report)"], ()),
      ("W24", "score: a model whose log-probs are NaN",
       ["slm_jax.score", f"--checkpoint={w}/hf_nan", f"--text_file={w}/doc.txt",
        f"--out={w}/nan.jsonl"], ("hf",)),
      *round4.cases(w),
  ]


# A malformed span tree stored in a GTCA parse cache, read back (gtca.parse_cache, or
# gtca.cache in the tree before it was split out).
MALFORMED_TREE = """
import sqlite3, sys
try:
  from slm_jax.gtca import parse_cache as pc
except ImportError:
  from slm_jax.gtca import cache as pc
from slm_jax import cli
path = sys.argv[1]
pc.ParseCache(path, {"tokenizer": "t"}, writable=True).close()
with sqlite3.connect(path) as db:
  db.execute("INSERT INTO spans VALUES (?, ?)", (pc.cache_key([5, 6, 7]), '{"v": 1, "nodes": [["S", 0, '))

def main(_):
  with pc.ParseCache(path, {"tokenizer": "t"}) as cache:
    cache.get([5, 6, 7], example="ex-1")

sys.exit(cli.run(main))
"""


# `eval.report.write_json` (how evaluate writes OUT/results.partial.json) on a full disk: the
# file is opened (truncated) and its write fails with ENOSPC; prints the file's size after.
FULL_DISK_PARTIAL = """
import errno, os, pathlib, sys
from slm_jax import cli
from slm_jax.eval import report
path = pathlib.Path(sys.argv[1]) / "results.partial.json"
path.parent.mkdir(parents=True, exist_ok=True)
report.write_json({"complete": False, "models": [{"name": "first"}]}, path)
real_open = pathlib.Path.open

class Full:
  def __init__(self, f):
    self.f = f
  def __enter__(self):
    return self
  def __exit__(self, *exc):
    self.f.close()
  def write(self, data):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

def full_open(self, mode="r", *args, **kwargs):
  f = real_open(self, mode, *args, **kwargs)
  return Full(f) if "w" in mode else f

def main(_):
  pathlib.Path.open = full_open
  try:
    report.write_json({"complete": False, "models": [{"name": "first"}, {"name": "2nd"}]}, path)
  finally:
    pathlib.Path.open = real_open
    print(f"SIZE {path.stat().st_size}", flush=True)

sys.exit(cli.run(main))
"""


def checkpointer_script() -> str:
  """The script of tests/test_checkpoint_failures.py: saves step 1, then step 2 with a failure."""
  sys.path.insert(0, str(HERE))
  from tests.test_checkpoint_failures import CHECKPOINTER  # pylint: disable=g-import-not-at-top
  return CHECKPOINTER


# The non-finite values in the parameters of every step saved in a checkpoints folder.
NONFINITE_PARAMS = """
import pathlib, sys, warnings
import jax, numpy as np, orbax.checkpoint as ocp
warnings.simplefilter("ignore")
folder = pathlib.Path(sys.argv[1])
counts = []
for step in sorted(int(p.name) for p in folder.glob("*") if p.name.isdigit()):
  state = ocp.PyTreeCheckpointer().restore(folder / str(step) / "state")
  leaves = [np.asarray(l) for l in jax.tree_util.tree_leaves(state["params"])]
  bad = sum(int((~np.isfinite(l)).sum()) for l in leaves if l.dtype.kind == "f")
  counts.append(f"step {step}: {bad} non-finite of {sum(l.size for l in leaves)}")
print("saved: " + "; ".join(counts) if counts else "no step saved")
"""


def nan_model(w: pathlib.Path) -> None:
  """`hf_nan`: the tiny HF folder with its final norm's weights NaN (every log-prob NaN)."""
  from safetensors import numpy as stn  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  shutil.rmtree(w / "hf_nan", ignore_errors=True)
  shutil.copytree(w / "hf", w / "hf_nan")
  (w / "nan.jsonl").unlink(missing_ok=True)
  weights = stn.load_file(w / "hf_nan" / "model.safetensors")
  weights["model.norm.weight"] = np.full_like(weights["model.norm.weight"], np.nan)
  stn.save_file(weights, w / "hf_nan" / "model.safetensors", metadata={"format": "pt"})


def orphans(r: Runner) -> tuple[int, str, str, str]:
  """Trains on 6 prepared GUM documents (streamed by Grain) with 2 worker processes, `kill -9`s
  the trainer once it logged a step, and counts its child processes still alive 5 s later (then
  ends them)."""
  folder = r.work / "grain"
  shutil.rmtree(folder, ignore_errors=True)
  gum = sorted((shared_data() / "gum" / "const").glob("*.ptb"))
  if not (r.work / "gum_prepared").is_dir():
    code, out, err = r.run("slm_jax.prepare", *map(str, gum[:6]), f"--output={r.work}/gum_prepared")
    if code:
      return code, out, err, "prepare failed"
  # output into files, not pipes: orphans holding the pipes would block reading them
  log = open(r.work / "grain.log", "w+")  # pylint: disable=consider-using-with
  p = subprocess.Popen(r.args(
      "slm_jax.main", "--config=configs/tgtree_tiny.py", "--config.train.steps=100000",
      *SMALL[2:], "--config.data.source=arrayrecord", f"--config.data.paths={r.work}/gum_prepared",
      f"--config.data.eval_paths={gum[6]}", "--config.data.worker_count=2",
      f"--workdir={folder}"), cwd=r.tree, env=r.env, text=True, stdout=log, stderr=log)
  deadline = time.time() + 900
  while p.poll() is None and time.time() < deadline and not (
      (folder / "metrics.jsonl").exists() and (folder / "metrics.jsonl").read_text().strip()):
    time.sleep(1)
  if p.poll() is not None:
    log.seek(0)
    return p.returncode, "", log.read(), "ended before the kill"
  children = set()
  for task in pathlib.Path(f"/proc/{p.pid}/task").iterdir():
    children |= {int(c) for c in (task / "children").read_text().split()}
  p.kill()
  p.wait()
  time.sleep(5)
  alive = sorted(c for c in children if pathlib.Path(f"/proc/{c}").exists() and "zombie" not in
                 pathlib.Path(f"/proc/{c}/status").read_text().lower())
  for c in alive:  # leave nothing behind
    os.kill(c, 9)
  log.seek(0)
  out, err = log.read(), ""
  log.close()
  return p.returncode, out, err, (f"{len(children)} child processes at the kill, "
                                  f"{len(alive)} alive 5 s later")


def concurrent(r: Runner, first: list[str], second: list[str]) -> tuple[int, str, str, str]:
  """Starts `first`, then `second` 0.5 s later; (the refused or second's code, out, err, note)."""
  a = r.popen(*first)
  time.sleep(0.5)
  b = r.popen(*second)
  results = {}
  for name, p in (("a", a), ("b", b)):
    out, err = p.communicate(timeout=600)
    results[name] = (p.returncode, out, err)
  loser = "b" if results["b"][0] or not results["a"][0] else "a"
  note = f"exit codes {results['a'][0]}, {results['b'][0]}"
  return (*results[loser], note)


def run_case(r: Runner, case) -> tuple[str, int, str]:
  """(command shown, exit code, message)."""
  ident, _, command, _ = case
  w = r.work
  note = ""
  if ident in round4.IDS:
    shown, code, out, err, note = round4.run_case(r, ident, command)
  elif ident == "B5":
    train = ["slm_jax.main", "--config=configs/tgtree_tiny.py", "--config.train.steps=4", *SMALL,
             f"--workdir={w}/conc"]
    code, out, err, note = concurrent(r, train, train)
    lines = (w / "conc" / "metrics.jsonl").read_text().splitlines() if (
        w / "conc" / "metrics.jsonl").exists() else []
    note += f"; metrics.jsonl {len(lines)} lines, {len(set(lines))} distinct"
    shown = "main … --workdir=$F/conc (twice, 0.5 s apart)"
  elif ident == "B6":
    ev = ["slm_jax.evaluate", f"--workdir={w}/run", "--tasks=docppl", "--docppl_documents=2",
          f"--out={w}/ev6"]
    code, out, err, note = concurrent(r, ev, ev)
    shown = "evaluate … --tasks=docppl --out=$F/ev6 (twice, 0.5 s apart)"
  elif ident == "B13":
    shutil.copytree(w / "run", w / "run13")
    with open(w / "run13" / "metrics.jsonl", "a") as f:
      f.write('{"step": 3, "loss": 2.7')
    code, out, err = r.run("slm_jax.main", "--config=configs/tgtree_tiny.py",
                           "--config.train.steps=3", "--config.train.checkpoint_every=2", *SMALL,
                           f"--workdir={w}/run13")
    shown = "main … --config.train.steps=3 --workdir=$F/run13 (metrics.jsonl cut)"
  elif ident == "B4":  # the items of ft first, then a fine-tune with another checkpoint
    first = [a.replace(f"{w}/ft_other", f"{w}/ft") for a in command]
    shutil.rmtree(w / "ev4", ignore_errors=True)
    r.run(*first)
    items = lambda: {p: p.read_bytes() for p in sorted((w / "ev4").rglob("*.jsonl"))}
    before = items()
    code, out, err = r.run(*command)
    if code == 0 and before:
      note = ("the first's item files reused unchanged" if items() == before
              else "items scored again")
    shown = ("evaluate --workdir=$F/run --tasks=boolq --boolq_finetuned=$F/ft_other "
             "--out=$F/ev4 (after the same with $F/ft)")
  elif ident == "W12":
    r.run("slm_jax.parse", f"{w}/doc.txt", f"--output={w}/parsed", "--backend=flat",
          "--no_cache")
    code, out, err = r.run("slm_jax.parse", f"{w}/doc.txt", f"--output={w}/parsed",
                           "--backend=passthrough", "--no_cache")
    shown = "parse doc.txt --output=$F/parsed --backend=passthrough (after --backend=flat)"
  elif ident == "W14":
    code, out, err = r.code("import runpy, sys\nsys.modules['apache_beam'] = None\n"
                            "sys.argv = ['beam_pipelines', '--help']\n"
                            "runpy.run_module('slm_jax.beam_pipelines', run_name='__main__')\n")
    shown = "beam_pipelines --help (apache_beam missing)"
  elif ident == "B7":  # a run whose stages are on disk, its result removed: resumed, other lr
    shutil.copytree(w / "gtca", w / "gtca7")
    (w / "gtca7" / "result.json").unlink(missing_ok=True)
    code, out, err = r.run("slm_jax.gtca.train", f"--backbone={w}/run", f"--out={w}/gtca7",
                           *GTCA, "--lr=2e-3", timeout=900)
    shown = "gtca.train --backbone=$F/run --out=$F/gtca7 … --lr=2e-3 (the run of --lr=1e-3)"
  elif ident == "W16":
    (w / "malformed.sqlite").unlink(missing_ok=True)  # a rerun (--reuse) starts afresh
    code, out, err = r.code(MALFORMED_TREE, str(w / "malformed.sqlite"))
    shown = "ParseCache(FILE).get(ids) of a record holding '{\"v\": 1, \"nodes\": [[\"S\", 0, '"
  elif ident in ("W17", "W18"):
    fail = "disk" if ident == "W17" else "ctrl_c"
    shutil.rmtree(w / f"ckpt_{fail}", ignore_errors=True)
    code, out, err = r.code(checkpointer_script(), str(w / f"ckpt_{fail}"), fail, timeout=120)
    note = f"{len(err.splitlines())} lines on stderr"
    shown = f"Checkpointer.save(2) with {fail} (after step 1), through cli.run"
  elif ident == "W19":
    shutil.rmtree(w / "bparsed", ignore_errors=True)
    beam = ["slm_jax.beam_pipelines", "parse", f"--output={w}/bparsed", "--num_shards=1",
            "--no_cache", f"{w}/doc.txt"]
    r.run(*beam, "--backend=flat")
    code, out, err = r.run(*beam, "--backend=passthrough")
    shown = ("beam_pipelines parse doc.txt --output=$F/bparsed --backend=passthrough (after "
             "--backend=flat)")
  elif ident == "B2":
    shutil.rmtree(w / "ft_b2", ignore_errors=True)
    code, out, err = r.run(*command, timeout=900)
    check = r.code(NONFINITE_PARAMS, str(w / "ft_b2" / "seed42" / "checkpoints"))
    lines = (check[1] + "\n" + check[2]).strip().splitlines() or ["?"]
    note = lines[0] if check[0] == 0 else f"parameters not read: {lines[-1]}"
    shown = " ".join([command[0].removeprefix("slm_jax."), *command[1:]]).replace(str(w), "$F")
  elif ident == "G1":
    code, out, err, note = orphans(r)
    shown = ("main … --config.data.worker_count=2 --workdir=$F/grain, kill -9 after its first "
             "step; workers alive 5 s later")
  elif ident == "W23":
    code, out, err = r.code(FULL_DISK_PARTIAL, str(w / "ev23"))
    size = [l.split()[1] for l in out.splitlines() if l.startswith("SIZE ")]
    out = "\n".join(l for l in out.splitlines() if not l.startswith("SIZE "))
    note = f"results.partial.json {size[0] if size else '?'} bytes after"
    shown = "report.write_json(results, OUT/results.partial.json) on a full disk, through cli.run"
  elif ident == "W24":
    nan_model(w)
    code, out, err = r.run(*command)
    text = (w / "nan.jsonl").read_text() if (w / "nan.jsonl").exists() else ""
    note = f"nan.jsonl: {text.count('NaN')} NaN literals, {text.count('null')} nulls"
    shown = " ".join([command[0].removeprefix("slm_jax."), *command[1:]]).replace(str(w), "$F")
  elif ident == "W22":
    code, out, err = r.code("import runpy, sys\nsys.modules['tensorflow_datasets'] = None\n"
                            f"sys.argv = ['tfds_build', {str(w / 'doc.txt')!r}, "
                            f"'--output={w}/tfds', '--name=x']\n"
                            "runpy.run_module('slm_jax.tfds_build', run_name='__main__')\n")
    shown = "tfds_build $F/doc.txt --output=$F/tfds --name=x (tensorflow_datasets missing)"
  else:
    code, out, err = r.run(*command, timeout=900)
    shown = " ".join([command[0].removeprefix("slm_jax."), *command[1:]]).replace(str(w), "$F")
  text = message(code, out, err, w)
  if note:
    text = f"{text} ({note})"
  return shown, code, text, round4.error_lines(err)


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--tree", required=True, help="the slm_jax checkout to run the cases on")
  parser.add_argument("--work", default=None, help="fixture folder (default: a temporary one)")
  parser.add_argument("--only", default="", help="comma-separated case ids")
  parser.add_argument("--reuse", action="store_true",
                      help="the fixtures in --work are built already (by this tree)")
  parser.add_argument("--jobs", type=int, default=2,
                      help="cases run at once (B5 and B6 always alone, first)")
  args = parser.parse_args()
  tree = pathlib.Path(args.tree).resolve()
  work = pathlib.Path(args.work or tempfile.mkdtemp(prefix="reliability_")).resolve()
  work.mkdir(parents=True, exist_ok=True)
  runner = Runner(tree, work)
  commit = subprocess.run(["git", "-C", str(tree), "log", "-1", "--format=%h"],
                          capture_output=True, text=True).stdout.strip()
  started = time.time()
  only = {c for c in args.only.split(",") if c}
  chosen = [c for c in cases(work) if not only or c[0] in only]
  failed = {} if args.reuse else build_fixtures(runner, {n for c in chosen for n in c[3]})
  chosen = [c for c in cases(work) if not only or c[0] in only]  # commands read the fixtures

  def row(case):
    ident, what, _, needs = case
    missing = [n for n in needs if n in failed]
    if missing:
      return (ident, what, "–", "–", f"fixture {missing[0]} failed: {failed[missing[0]]}"), []
    shown, code, text, errors = run_case(runner, case)
    print(f"{ident}: exit {code}: {text}", file=sys.stderr, flush=True)
    return (ident, what, f"`{shown}`", str(code), text), errors

  alone = [c for c in chosen if c[0] in ("B5", "B6")]  # timing-sensitive: nothing beside them
  done = {c[0]: row(c) for c in alone}
  groups: dict[str, list] = {}  # cases that use one writable fixture run one after another
  for case in chosen:
    if case not in alone:
      groups.setdefault(SERIAL.get(case[0], case[0]), []).append(case)
  with futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
    for group in pool.map(lambda cs: [row(c) for c in cs], groups.values()):
      done.update((r[0][0], r) for r in group)
  rows = [done[c[0]] for c in chosen]
  print(f"Tree `{tree}` (commit {commit}), {time.time() - started:.0f} s; `$F` = the fixture "
        "folder.\n")
  print("| case | what | command | exit | first line of the message |")
  print("|---|---|---|---|---|")
  for cells, _ in rows:
    print("| " + " | ".join(cells) + " |")
  tracebacks = [cells[0] for cells, errors in rows if any(e.startswith("Traceback")
                                                           for e in errors)]
  multi = [cells[0] for cells, errors in rows if len(errors) > 1]
  print(f"\nCases with a traceback on stderr: {len(tracebacks)} ({', '.join(tracebacks) or '–'});"
        f" with more than one error line: {len(multi)} ({', '.join(multi) or '–'}), of "
        f"{len(rows)} cases.")
  return 0


if __name__ == "__main__":
  sys.exit(main())
