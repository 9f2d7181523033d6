"""Hugging Face checkpoints in the NNX decoder (SPEC §13): import, export, tokenizer.

`load_model(folder)` / `load_params(folder, cfg, shardings=...)` read `LlamaForCausalLM`,
`Qwen2ForCausalLM` and `Olmo2ForCausalLM` safetensors checkpoints (fp32 or bf16, one file or
shards) tensor by tensor onto their mesh shards (`slm_jax.hf.load`); `slm_jax.hf.config` maps
`config.json` both ways, `slm_jax.hf.layout` places each tensor, `slm_jax.hf.safetensors_io`
reads and writes the files, `slm_jax.hf.tokenizer` runs the checkpoint's `tokenizer.json` and
chat template; `slm_jax.hf.export.write_llama` writes a causal SLM as a Llama folder (the CLI:
`python -m slm_jax.export`).
GGUF files (`slm_jax.hf.gguf`, `gguf_quant`, `gguf_tokenizer`, `gguf_export`) are checkpoints
too: every entry above takes a `.gguf` path; `load_checkpoint(path)` gives config, model and
tokenizer of either kind.
Nothing here imports torch or transformers.
"""

from slm_jax.hf.config import ARCHITECTURES, ExportError, HfConfigError
from slm_jax.hf.load import (Checkpoint, check_matches, import_config, load_checkpoint,
                             load_model, load_params)
from slm_jax.hf.safetensors_io import HfCheckpointError, CheckpointFiles
