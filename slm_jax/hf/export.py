"""`python -m slm_jax.hf.export --workdir=RUN --out=DIR`: a trained SLM as a `LlamaForCausalLM`
(`--checkpoint=FILE.gguf`: a GGUF file as a safetensors folder, `slm_jax.hf.gguf_export`).

Writes `config.json`, `model.safetensors` (sharded with an index above 5 GB), `tokenizer.json`
(the run's base vocabulary plus every reserved structural token at its id),
`tokenizer_config.json` and `generation_config.json`, so transformers, vLLM and lm-eval-harness
load the folder as is and give the same logits (SPEC §13). LoRA adapters are merged into their
kernels first. Only causal attention can be exported: the Transformer-Grammar masks (tg, tg_nomask,
mix(…)) depend on each token's structural kind and stack position, which a Llama cannot compute;
such runs, and models with norm biases or OLMo-2 blocks, are refused with the reason.
"""

from __future__ import annotations

import json
import pathlib
import sys

import jax
import numpy as np
from flax import nnx

from slm_jax import cli
from slm_jax.hf.config import llama_config
from slm_jax.hf.gguf_export import export_gguf
from slm_jax.hf.layout import sources, to_hf
from slm_jax.hf.safetensors_io import write_checkpoint
from slm_jax.hf.tokenizer import TOKENIZER_CONFIG, TOKENIZER_FILE, special_tokens_map, tokenizer_json
from slm_jax.model import lora
from slm_jax.train.loading import load_run

DTYPES = ("float32", "bfloat16")


def export(workdir: str | pathlib.Path, out: str | pathlib.Path, *, step: int | None = None,
           dtype: str = "float32", force: bool = False) -> pathlib.Path:
  """Writes the Llama folder of `workdir`'s newest checkpoint (or `step`) to `out`."""
  out = pathlib.Path(out)
  if out.exists() and any(out.iterdir()) and not force:
    raise cli.CliError(f"{out} exists and is not empty; pass --force to overwrite")
  run = load_run(workdir, step=step, dtype="float32")
  cfg = run.model.config
  tok = run.tokenizer
  hf_config = llama_config(cfg, torch_dtype=dtype, bos_token_id=tok.bos_id,
                           eos_token_id=tok.eos_id, pad_token_id=tok.pad_id)
  files_json, names = tokenizer_json(tok)
  merged = lora.merge(run.model)
  params = jax.tree.map(np.asarray, nnx.to_pure_dict(nnx.state(run.model, nnx.Param)))
  flat = {jax.tree_util.keystr(p, simple=True, separator="/"): x
          for p, x in jax.tree_util.tree_flatten_with_path(params)[0]}
  tensors: dict[str, np.ndarray] = {}
  for path, source in sources(cfg, "LlamaForCausalLM").items():
    for name, array in to_hf(source, flat[path]).items():
      tensors[name] = array.astype(np.dtype(dtype))
  out.mkdir(parents=True, exist_ok=True)
  write_checkpoint(out, tensors)
  (out / "config.json").write_text(json.dumps(hf_config, indent=2) + "\n")
  (out / "generation_config.json").write_text(json.dumps(
      {"bos_token_id": tok.bos_id, "eos_token_id": tok.eos_id, "pad_token_id": tok.pad_id},
      indent=2) + "\n")
  (out / TOKENIZER_FILE).write_text(files_json, encoding="utf-8")
  (out / TOKENIZER_CONFIG).write_text(json.dumps(
      {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": run.cfg.data.seq_len,
       "add_bos_token": False, "add_eos_token": False, **special_tokens_map(tok, names)},
      indent=2) + "\n")
  print(f"exported {run.workdir} step {run.step} ({run.configuration.name}, "
        f"{sum(a.size for a in tensors.values()):,} parameters, {dtype}"
        f"{f', {merged} LoRA layers merged' if merged else ''}) to {out}", flush=True)
  return out


def main(argv: list[str] | None = None) -> int:
  parser = cli.ArgumentParser(prog="python -m slm_jax.hf.export", description=__doc__)
  source = parser.add_mutually_exclusive_group(required=True)
  source.add_argument("--workdir", help="the slm_jax training workdir")
  source.add_argument("--checkpoint", help="a .gguf file (written as a safetensors folder)")
  parser.add_argument("--out", required=True, help="the folder to write (HF layout)")
  parser.add_argument("--step", type=int, default=None, help="checkpoint step (default: newest)")
  parser.add_argument("--dtype", choices=DTYPES, default="float32",
                      help="dtype of the written tensors (default float32)")
  parser.add_argument("--force", action="store_true", help="overwrite a non-empty --out")
  args = parser.parse_args(argv)
  if args.checkpoint:
    export_gguf(args.checkpoint, args.out, dtype=args.dtype, force=args.force)
  else:
    export(args.workdir, args.out, step=args.step, dtype=args.dtype, force=args.force)
  return cli.EXIT_OK


if __name__ == "__main__":
  sys.exit(cli.run(main))
