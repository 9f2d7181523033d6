"""The toy GTCA sweep of docs/GTCA_TOY.md: every method and ablation × 5 seeds on the embedded
grammar's agreement task, on a `terminal_tiny` backbone trained first with
`python -m slm_jax.main --config=configs/terminal_tiny.py --workdir=runs/terminal_tiny`.

  python -m slm_jax.gtca.train --config=toy                      # about 11 min of CPU per seed
  python -m slm_jax.gtca.train --config=toy --seeds=0 --methods=gtca,lora_only   # a smaller one

The weak-parser row needs a weaker trained parser's folder (docs/GTCA_TOY.md says how it was
trained): `--methods=weak_parser --weak_parser=FOLDER`.
"""

import ml_collections


def get_config():
  config = ml_collections.ConfigDict()
  config.backbone = "runs/terminal_tiny"
  config.out = "gtca_runs/toy"
  config.methods = ("backbone", "lora_only", "direct_joint", "gtca", "no_gate", "no_mask",
                    "right_branching", "random_trees", "permuted_trees")
  config.seeds = (0, 1, 2, 3, 4)
  config.stage_steps = (150, 150, 150)
  config.batch_size = 16
  config.lr = 3e-3
  config.option_order = "fixed"
  config.log_every = 150
  config.jit_cache = "gtca_runs/jit_cache"
  return config
