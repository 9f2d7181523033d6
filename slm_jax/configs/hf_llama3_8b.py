"""LoRA on a frozen Llama-3.1-8B (SPEC §13; llama3 RoPE scaling), one 8-chip host (fsdp=8).

Download first (a machine with network, after accepting Meta's license on the hub):
`huggingface-cli download meta-llama/Llama-3.1-8B --local-dir checkpoints/Llama-3.1-8B`
(huggingface_hub ≥ 1: `hf download …`). For Meta-Llama-3-8B (no RoPE scaling) point
model.init_from there and set model.rope_scaling=none.
"""

from slm_jax.train.params import hf_preset


def get_config():
  return hf_preset("hf_llama3_8b", "terminal", "checkpoints/Llama-3.1-8B", dict(
      d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8, head_dim=128,
      mlp_ratio=2 * 14336 / 4096, rope_theta=500_000.0, norm_eps=1e-5, tie_embeddings=False,
      norm_cast_first=True, rope_scaling="llama3", rope_factor=8.0, rope_low_freq_factor=1.0,
      rope_high_freq_factor=4.0, rope_original_max_position=8192))
