"""Step Law (Li et al., 2025): peak learning rate and batch size from N and D (SPEC §7).

The only place the law lives; `slm_jax.train.run_config` calls it for the 100m/500m/1b scales.

Convention that reproduces the paper's Table 8 (SPEC §7) exactly: N is OLMo's
`num_params(include_embedding=False)` with `include_bias=True`, i.e. every linear layer has a bias
and every RMSNorm a weight and a bias. For the 500M model (d 1408, mlp_ratio 8, 16 layers) that is
N = 507,896,576, which gives all six learning rates to the 7 printed digits (N = 507.9M exactly
is off by 5e-6 relative, still right to 4 significant digits). The batch in sequences is
`batch_tokens / seq_len` rounded to the nearest multiple of the data-parallel replica count
(round half up, never below one multiple); this gives every batch of the table, Pause-2 with its
2,049-position rows included (64.31 → 64, Pause-1 51.04 → 52, Tree 57.33 → 58).
"""

from __future__ import annotations

import math
from typing import NamedTuple


class StepLaw(NamedTuple):
  peak_lr: float
  batch_tokens: float  # the law's batch size in tokens, before rounding
  global_batch: int  # sequences per optimizer step, a multiple of data_parallel


def step_law(non_embedding_params: float, train_tokens: float, seq_len: int,
             data_parallel: int = 2) -> StepLaw:
  """`lr = 1.79·N^-0.713·D^0.307`, `batch_tokens = 0.58·D^0.571`, batch in sequences (see module)."""
  if non_embedding_params <= 0 or train_tokens <= 0:
    raise ValueError(f"step_law needs N > 0 and D > 0, got N={non_embedding_params}, "
                     f"D={train_tokens}")
  if seq_len <= 0 or data_parallel <= 0:
    raise ValueError(f"step_law needs seq_len > 0 and data_parallel > 0, got seq_len={seq_len}, "
                     f"data_parallel={data_parallel}")
  n, d = float(non_embedding_params), float(train_tokens)
  peak_lr = 1.79 * n**-0.713 * d**0.307
  batch_tokens = 0.58 * d**0.571
  multiples = max(1, math.floor(batch_tokens / seq_len / data_parallel + 0.5))
  return StepLaw(peak_lr, batch_tokens, multiples * data_parallel)
