"""Fused structural attention kernels (SPEC §3) and their shared block planner.

Import-light on purpose: importing the package loads only the planner (jax.numpy + numpy). The
kernels import only `slm_jax.structure` and the block planner, never the model; the model's static
table (`slm_jax.model.attention.KERNELS`) names the module and function of each one and imports it
the first time `attention_impl` asks for it:
  slm_jax.kernels.tpu_attention.pallas_attention     "pallas_tpu" (Pallas / Mosaic TPU; interpret
                                                     mode for a CPU target)
  slm_jax.kernels.triton_attention.triton_attention  "triton_gpu" (needs jax-triton and a GPU
                                                     jaxlib)
`target` says what a computation is compiled for (the mesh in force); `mosaic_compile` compiles the
Pallas kernel for a TPU chip with libtpu on any host (tests, benchmarks/mosaic_limits.py).
"""

from slm_jax.kernels.block_plan import BlockPlan, plan_blocks  # noqa: F401
