"""LoRA on a frozen OLMo-2-1B (SPEC §13; post-norm blocks, QK-norm), one 8-chip host (fsdp=8).

Download first (a machine with network): `huggingface-cli download allenai/OLMo-2-0425-1B
--local-dir checkpoints/OLMo-2-0425-1B` (huggingface_hub ≥ 1: `hf download …`).
"""

from slm_jax.train.params import hf_preset


def get_config():
  return hf_preset("hf_olmo2_1b", "terminal", "checkpoints/OLMo-2-0425-1B", dict(
      d_model=2048, n_layers=16, n_heads=16, n_kv_heads=16, head_dim=128,
      mlp_ratio=2 * 8192 / 2048, rope_theta=500_000.0, norm_eps=1e-6, tie_embeddings=False,
      qk_norm=True, norm_position="post"))
