"""LoRA on a frozen Qwen-2.5-7B (SPEC §13), one 8-chip host (mesh fsdp=8).

Download first (a machine with network): `huggingface-cli download Qwen/Qwen2.5-7B
--local-dir checkpoints/Qwen2.5-7B` (huggingface_hub ≥ 1: `hf download …`). The model keys are
that checkpoint's config.json; the run checks them against it before reading any weight.
"""

from slm_jax.train.params import hf_preset


def get_config():
  return hf_preset("hf_qwen2_5_7b", "terminal", "checkpoints/Qwen2.5-7B", dict(
      d_model=3584, n_layers=28, n_heads=28, n_kv_heads=4, head_dim=128,
      mlp_ratio=2 * 18944 / 3584, rope_theta=1_000_000.0, norm_eps=1e-6, tie_embeddings=False,
      qkv_bias=True, norm_cast_first=True))
