"""Fused structural attention kernels (SPEC §3) and their shared block planner.

Import-light on purpose: importing the package loads only the planner (jax.numpy + numpy). The
kernels register themselves in `slm_jax.model.attention.ATTENTION_KERNELS` when their modules are
imported (the model does that on first use):
  pallas_kernels.tpu_attention     "pallas_tpu" (Pallas / Mosaic TPU; interpret mode on CPU)
  pallas_kernels.triton_attention  "triton_gpu" (needs jax-triton and a GPU jaxlib)
"""

from pallas_kernels.block_plan import BlockPlan, plan_blocks  # noqa: F401
