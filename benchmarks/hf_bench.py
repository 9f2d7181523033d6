"""Hugging Face import and scoring on CPU: slm_jax next to transformers, in the same run.

  python benchmarks/hf_bench.py [--layers 16] [--hidden 2048] [--intermediate 8192]
      [--vocab 50304] [--seq 128] [--repeats 2] [--folder DIR] [--devices 4]

Writes a random `LlamaForCausalLM` checkpoint of the given (default: 1B-class) shape in bf16,
streamed tensor by tensor into 1 GB shards, then measures, each in a fresh process so peak host
memory is its own: slm_jax's import onto `--devices` forced CPU devices (mesh fsdp = devices,
THE partition table) with bf16 and float32 parameters, and transformers' `from_pretrained`
(float32); then float32 scoring throughput (tokens/s of one `--seq`-token row, median of
`--repeats` after a warm-up) of `slm_jax.inference.text_scorer.TextScorer` and of transformers'
forward on the same CPU. Peak memory is the rise of the process's max RSS over its RSS before
the import, next to the checkpoint's size on disk and the bytes of the parameters it holds
(Linux: ru_maxrss at the end minus the resident set just before the import).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from slm_jax.benchtools import parser as make_parser, table  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]

_OURS = """
import json, os, resource, sys, time
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count={devices}"
sys.path.insert(0, {root!r})
import jax, jax.numpy as jnp, numpy as np
from flax import nnx
from slm_jax.benchtools import median_of
from slm_jax.hf import load
from slm_jax.inference.text_scorer import TextScorer
from slm_jax.train import sharding
peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
now = lambda: int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
mesh = sharding.make_mesh(data=1, fsdp=jax.device_count())
before, start = now(), time.perf_counter()
model = load.load_model({folder!r}, compute_dtype=jnp.float32, param_dtype=jnp.{dtype},
                        shardings=lambda t: sharding.tree_shardings(t, mesh))
state = jax.block_until_ready(nnx.state(model))
out = {{"seconds": time.perf_counter() - start, "peak": peak() - before,
        "param_bytes": sum(x.nbytes for x in jax.tree.leaves(state))}}
if {score}:
  ids = np.random.default_rng(0).integers(0, model.config.vocab_size, {seq})
  scorer = TextScorer(model, batch_size=1)
  out["score_seconds"], _ = median_of({repeats}, lambda: scorer.score([ids]))
print("RESULT " + json.dumps(out))
"""

_THEIRS = """
import json, os, resource, time, torch, transformers, numpy as np
peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
now = lambda: int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
torch.set_num_threads({threads})
before, start = now(), time.perf_counter()
model = transformers.AutoModelForCausalLM.from_pretrained({folder!r}, dtype=torch.float32,
                                                          attn_implementation="eager").eval()
out = {{"seconds": time.perf_counter() - start, "peak": peak() - before,
        "param_bytes": sum(p.numel() * p.element_size() for p in model.parameters())}}
ids = torch.tensor(np.random.default_rng(0).integers(0, model.config.vocab_size, (1, {seq})))
times = []
with torch.no_grad():
  model(ids)
  for _ in range({repeats}):
    start = time.perf_counter(); model(ids).logits.float().log_softmax(-1)
    times.append(time.perf_counter() - start)
out["score_seconds"] = float(np.median(times))
print("RESULT " + json.dumps(out))
"""


def write_random_checkpoint(folder: pathlib.Path, args) -> None:
  """A random bf16 Llama checkpoint of the requested shape, written tensor by tensor."""
  import ml_dtypes  # pylint: disable=import-outside-toplevel
  from slm_jax.hf.safetensors_io import write_checkpoint  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(0)
  d, f, v, heads = args.hidden, args.intermediate, args.vocab, args.heads
  k = d // heads

  def tensor(*shape, scale=0.02):
    return (rng.standard_normal(shape, dtype=np.float32) * scale).astype(ml_dtypes.bfloat16)

  def tensors():
    yield "model.embed_tokens.weight", tensor(v, d)
    for i in range(args.layers):
      p = f"model.layers.{i}."
      yield p + "input_layernorm.weight", (1 + tensor(d)).astype(ml_dtypes.bfloat16)
      yield p + "post_attention_layernorm.weight", (1 + tensor(d)).astype(ml_dtypes.bfloat16)
      for name, rows in (("q", d), ("k", args.kv_heads * k), ("v", args.kv_heads * k)):
        yield f"{p}self_attn.{name}_proj.weight", tensor(rows, d)
      yield p + "self_attn.o_proj.weight", tensor(d, d)
      yield p + "mlp.gate_proj.weight", tensor(f, d)
      yield p + "mlp.up_proj.weight", tensor(f, d)
      yield p + "mlp.down_proj.weight", tensor(d, f)
    yield "model.norm.weight", (1 + tensor(d)).astype(ml_dtypes.bfloat16)
    yield "lm_head.weight", tensor(v, d)

  write_checkpoint(folder, tensors(), max_shard_bytes=2**30)
  config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": d,
            "intermediate_size": f, "num_hidden_layers": args.layers,
            "num_attention_heads": heads, "num_key_value_heads": args.kv_heads, "head_dim": k,
            "vocab_size": v, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
            "max_position_embeddings": 4096, "tie_word_embeddings": False,
            "torch_dtype": "bfloat16", "hidden_act": "silu"}
  (folder / "config.json").write_text(json.dumps(config, indent=2))


def child(script: str) -> dict:
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                        cwd=ROOT)
  if done.returncode:
    raise RuntimeError(done.stderr[-3000:])
  return json.loads(next(l for l in done.stdout.splitlines() if l.startswith("RESULT "))[7:])


def main(argv=None) -> int:
  parser = make_parser(__doc__)
  parser.add_argument("--layers", type=int, default=16)
  parser.add_argument("--hidden", type=int, default=2048)
  parser.add_argument("--intermediate", type=int, default=8192)
  parser.add_argument("--heads", type=int, default=16)
  parser.add_argument("--kv_heads", type=int, default=16)
  parser.add_argument("--vocab", type=int, default=50304)
  parser.add_argument("--seq", type=int, default=128)
  parser.add_argument("--repeats", type=int, default=2)
  parser.add_argument("--devices", type=int, default=4)
  parser.add_argument("--folder", type=pathlib.Path, default=None,
                      help="write (or reuse) the checkpoint here (default: a temporary folder)")
  parser.add_argument("--skip_transformers", action="store_true")
  args = parser.parse_args(argv)
  folder = args.folder or pathlib.Path(tempfile.mkdtemp(prefix="hf_bench_"))
  if not (folder / "config.json").is_file():
    write_random_checkpoint(folder, args)
  disk = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
  common = dict(root=str(ROOT), folder=str(folder), seq=args.seq, repeats=args.repeats)
  rows = []
  gb = lambda n: f"{n / 1e9:.2f}"
  for dtype, devices, score in (("bfloat16", args.devices, False),
                                ("float32", args.devices, False), ("float32", 1, True)):
    r = child(_OURS.format(devices=devices, dtype=dtype, score=score, **common))
    rows.append([f"slm_jax import, {dtype} params, {devices} CPU device(s)", f"{r['seconds']:.1f}",
                 gb(disk), gb(r["param_bytes"]), gb(r["peak"]), f"{r['peak'] / disk:.2f}",
                 f"{args.seq / r['score_seconds']:.0f}" if score else "–"])
  if not args.skip_transformers:
    r = child(_THEIRS.format(threads=os.cpu_count(), **common))
    rows.append(["transformers from_pretrained, float32, eager", f"{r['seconds']:.1f}", gb(disk),
                 gb(r["param_bytes"]), gb(r["peak"]), f"{r['peak'] / disk:.2f}",
                 f"{args.seq / r['score_seconds']:.0f}"])
  params = (args.vocab * args.hidden * 2 + args.layers * (
      2 * args.hidden * args.hidden + 2 * args.hidden * args.kv_heads * args.hidden // args.heads
      + 3 * args.hidden * args.intermediate))
  print(f"checkpoint: {params / 1e9:.2f}B parameters, {len(list(folder.glob('*.safetensors')))} "
        f"bf16 shard(s) in {folder}; scoring: 1 row of {args.seq} tokens, median of "
        f"{args.repeats}, CPU ({os.cpu_count()} cores)")
  print(table(["what", "import s", "disk GB", "params GB", "peak RSS rise GB", "peak / disk",
               "score tokens/s"], rows))
  return 0


if __name__ == "__main__":
  sys.exit(main())
