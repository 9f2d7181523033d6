"""Model FLOPs and MFU: the one rule (the trainer's log, `slm_jax.aot`'s table).

Model FLOPs per trained token (PaLM, App. B): `6·N + 12·L·H·K·T` — N the non-embedding
parameters plus the output projection (d·V: a tied head is still a matmul), L layers, H query
heads of K dims, T the sequence length. The attention term counts the full T×T score and
value matmuls: structural masks (TG STACK/COMPOSE, causal) are counted as dense, as kernels
without block skipping compute them, so MFU is comparable across configurations (a block-skipping
kernel does less work than it is credited with). Rematerialization is not counted (model FLOPs,
not hardware FLOPs).

MFU = achieved model FLOP/s per chip / the chip's peak dense bf16 FLOP/s (`PEAK_BF16_FLOPS`, by
`jax.Device.device_kind`; vendor datasheet numbers, without sparsity). An unknown device kind has
no MFU (None): the log then shows tokens/s only.
"""

from __future__ import annotations

from typing import Any

# Peak dense bf16 FLOP/s per chip (one jax device), from the vendors' datasheets.
PEAK_BF16_FLOPS = {
    "TPU v4": 275e12,
    "TPU v5 lite": 197e12,  # v5e
    "TPU v5e": 197e12,
    "TPU v5": 459e12,  # v5p
    "TPU v5p": 459e12,
    "TPU v6 lite": 918e12,  # v6e (Trillium)
    "TPU v6e": 918e12,
    "NVIDIA A100-SXM4-40GB": 312e12,
    "NVIDIA A100-SXM4-80GB": 312e12,
    "NVIDIA A100 80GB PCIe": 312e12,
    "NVIDIA H100 80GB HBM3": 989e12,
    "NVIDIA H100 PCIe": 756e12,
    "NVIDIA H200": 989e12,
    "NVIDIA GH200 480GB": 989e12,
    "NVIDIA L4": 121e12,
}


def model_flops_per_token(model: Any, seq_len: int) -> float:
  """6·N + 12·L·H·K·T for a `ModelConfig` with its vocabulary set (module docstring)."""
  from slm_jax.model.decoder import non_embedding_param_count  # pylint: disable=g-import-not-at-top
  if model.vocab_size is None:
    raise ValueError("model_flops_per_token needs model.vocab_size (the tokenizer's size)")
  n = non_embedding_param_count(model) + model.d_model * model.vocab_size
  return float(6 * n + 12 * model.n_layers * model.n_heads * model.head_dim * seq_len)


def peak_flops(device_kind: str) -> float | None:
  """The peak dense bf16 FLOP/s of a device kind (exact name, then the longest known prefix)."""
  if device_kind in PEAK_BF16_FLOPS:
    return PEAK_BF16_FLOPS[device_kind]
  known = [k for k in PEAK_BF16_FLOPS if device_kind.startswith(k)]
  return PEAK_BF16_FLOPS[max(known, key=len)] if known else None


def throughput(tokens_per_s: float, chips: int, flops_per_token: float,
               device_kind: str) -> dict[str, float]:
  """The log's throughput fields: tokens/s/chip, always; MFU where the peak is known."""
  per_chip = tokens_per_s / max(chips, 1)
  out = {"tokens_per_s_per_chip": per_chip}
  peak = peak_flops(device_kind)
  if peak:
    out["mfu"] = per_chip * flops_per_token / peak
  return out
