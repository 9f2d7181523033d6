"""LoRA on any Hugging Face folder or GGUF file, every dimension read from the checkpoint
(SPEC §13): `python -m slm_jax.main --config=hf --config.model.init_from=DIR|FILE.gguf`.

d_model, layers, heads, KV heads, head_dim, MLP width, RoPE θ and scaling, tying, norm eps and
biases come from the checkpoint's config.json (or GGUF metadata), the tokenizer from its
tokenizer.json (a GGUF: export it first, `python -m slm_jax.export --checkpoint=FILE.gguf
--out=DIR`, and pass `--config.data.tokenizer_path=DIR/tokenizer.json` or start from DIR); a
`--config.model.KEY` that contradicts the checkpoint is refused naming both values
(`slm_jax.train.run_config.checkpoint_overrides`). The rest is the presets' LoRA recipe
(`slm_jax.train.params.PRESET`: rank 16 on every projection over a frozen bf16 backbone, 2,000
steps, fsdp=8): override what a smaller machine needs (`mesh.fsdp`, `train.global_batch`, …).
"""

from slm_jax.train.params import hf_preset


def get_config():
  return hf_preset("hf", "terminal", "", {})
