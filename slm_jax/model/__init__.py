"""The OLMo-style decoder with structural attention (SPEC §6) and its loss."""

from slm_jax.model.attention import (ATTENTION_KERNELS, KernelNotRegisteredError, SelfAttention,
                                     attention_mask, register_attention_kernel,
                                     resolve_attention_impl, xla_attention)
from slm_jax.model.config import SCALES, ModelConfig, scale_config
from slm_jax.model.decoder import Block, Decoder, non_embedding_param_count, param_count
from slm_jax.model.layers import RMSNorm, SwiGLU, apply_rope
from slm_jax.model.loss import LossMetrics, loss_and_metrics
