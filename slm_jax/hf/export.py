"""A trained SLM as a `LlamaForCausalLM` folder (the library of `python -m slm_jax.export`).

`write_llama(model, tokenizer, out, dtype=…, max_length=…)` writes `config.json`,
`model.safetensors` (sharded with an index above 5 GB), `tokenizer.json` (the run's base
vocabulary plus every reserved structural token at its id), `tokenizer_config.json` and
`generation_config.json`, so transformers, vLLM and lm-eval-harness
load the folder as is and give the same logits (SPEC §13). LoRA adapters are merged into their
kernels first. Only causal attention can be exported: the Transformer-Grammar masks (tg, tg_nomask,
mix(…)) depend on each token's structural kind and stack position, which a Llama cannot compute;
such runs, and models with norm biases or OLMo-2 blocks, are refused with the reason.
"""

from __future__ import annotations

import json
import pathlib

import jax
import numpy as np
from flax import nnx

from slm_jax.hf.config import llama_config
from slm_jax.hf.layout import sources, to_hf
from slm_jax.hf.safetensors_io import write_checkpoint
from slm_jax.hf.tokenizer import TOKENIZER_CONFIG, TOKENIZER_FILE, special_tokens_map, tokenizer_json
from slm_jax.model import lora


def write_llama(model, tokenizer, out: str | pathlib.Path, *, dtype: str = "float32",
                max_length: int) -> tuple[int, int]:
  """Writes `model` (an NNX `Decoder`; its LoRA adapters merged into their kernels first, in place)
  and `tokenizer` as a Llama folder at `out` (module docstring); `max_length`, the length the
  model was trained on, is config.json's `max_position_embeddings` and the tokenizer's
  `model_max_length`. Returns (parameters written, LoRA layers merged). A model Llama cannot
  express raises `ExportError` before anything is written."""
  out = pathlib.Path(out)
  cfg = model.config
  hf_config = llama_config(cfg, max_position_embeddings=max_length, torch_dtype=dtype,
                           bos_token_id=tokenizer.bos_id,
                           eos_token_id=tokenizer.eos_id, pad_token_id=tokenizer.pad_id)
  files_json, names = tokenizer_json(tokenizer)
  merged = lora.merge(model)
  params = jax.tree.map(np.asarray, nnx.to_pure_dict(nnx.state(model, nnx.Param)))
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
      {"bos_token_id": tokenizer.bos_id, "eos_token_id": tokenizer.eos_id,
       "pad_token_id": tokenizer.pad_id}, indent=2) + "\n")
  (out / TOKENIZER_FILE).write_text(files_json, encoding="utf-8")
  (out / TOKENIZER_CONFIG).write_text(json.dumps(
      {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": max_length,
       "add_bos_token": False, "add_eos_token": False, **special_tokens_map(tokenizer, names)},
      indent=2) + "\n")
  return sum(a.size for a in tensors.values()), merged


if __name__ == "__main__":  # the module path of an older export command: say the current one
  import sys  # pylint: disable=g-import-not-at-top
  print("error: python -m slm_jax.hf.export is the export library, not a command; run python -m "
        "slm_jax.export --workdir=RUN --out=DIR (a GGUF file: --checkpoint=FILE.gguf)",
        file=sys.stderr)
  sys.exit(2)
