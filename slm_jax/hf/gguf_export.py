"""A GGUF file as a Hugging Face safetensors folder that transformers loads with the same logits.

`export_gguf(path, out, dtype=...)` writes `config.json` (`GgufFile.hf_config`), `model.safetensors`
(every tensor dequantized, q/k in the rotate-half layout, under its HF name; `dtype` float32 or
bfloat16), `tokenizer.json` (the tokenizer rebuilt from the GGUF vocabulary, its BOS/EOS
post-processor included), `tokenizer_config.json` (special tokens, add_bos_token, the chat template)
and `generation_config.json`. `python -m slm_jax.export --checkpoint=FILE.gguf --out=DIR`.
Tensors the file holds without a Hugging Face name are left out and named in the printed line.
The folder is written whole (`files.replace_folder`): `force` replaces a non-empty `out` with
nothing of its old content left, and a failed export leaves it as it was.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np

from slm_jax import files
from slm_jax.hf.gguf import open_gguf
from slm_jax.hf.safetensors_io import write_checkpoint
from slm_jax.hf.tokenizer import TOKENIZER_CONFIG, TOKENIZER_FILE, CheckpointTokenizer

DTYPES = ("float32", "bfloat16")


def export_gguf(path: str | pathlib.Path, out: str | pathlib.Path, *, dtype: str = "float32",
                force: bool = False) -> pathlib.Path:
  """Writes GGUF file `path` as a Hugging Face folder `out` (see the module docstring)."""
  out = pathlib.Path(out)
  if dtype not in DTYPES:
    raise ValueError(f"dtype={dtype!r}: one of {', '.join(DTYPES)}")
  files.check_replaceable(out, force)
  g = open_gguf(path)
  with files.replace_folder(out, force=force) as folder:
    count, written = _write(g, path, folder, dtype)
  left = g.tensors.unnamed
  print(f"exported {path} ({g.hf_config['architectures'][0]}, {count:,} parameters, {dtype}, "
        f"{written} file(s)) to {out}"
        + (f"; {len(left)} GGUF tensors without a Hugging Face name left out: "
           f"{', '.join(left[:5])}" if left else ""), flush=True)
  return out


def _write(g, path: pathlib.Path, out: pathlib.Path, dtype: str) -> tuple[int, int]:
  """Writes the folder's files into `out`; (parameters, safetensors files written)."""
  tokenizer = CheckpointTokenizer(path)
  stored = g.tensors
  count = 0

  def tensors():
    nonlocal count
    for name in stored.hf_names:
      array = stored.read(name).astype(np.dtype(dtype))
      count += array.size
      yield name, array

  write_count = len(write_checkpoint(out, tensors()))
  hf = g.hf_config
  (out / "config.json").write_text(json.dumps(
      {**hf, "torch_dtype": dtype, "dtype": dtype}, indent=2) + "\n")
  ids = {key: hf[key] for key in ("bos_token_id", "eos_token_id", "pad_token_id")}
  (out / "generation_config.json").write_text(json.dumps(ids, indent=2) + "\n")
  (out / TOKENIZER_FILE).write_text(tokenizer.tokenizer.to_str(), encoding="utf-8")
  special = {k: v for k, v in tokenizer.special.items() if v is not None}
  config = {"tokenizer_class": "PreTrainedTokenizerFast", **special,
            "add_bos_token": tokenizer.add_bos,
            "add_eos_token": bool(g.value("tokenizer.ggml.add_eos_token", False))}
  if hf["max_position_embeddings"]:
    config["model_max_length"] = hf["max_position_embeddings"]
  if tokenizer.template is not None:
    config["chat_template"] = tokenizer.template
  (out / TOKENIZER_CONFIG).write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
  return count, write_count
