"""LoRA-only vs GTCA on MMLU with a frozen Qwen2.5-0.5B (the README's real-set example; needs the
downloads, on a machine with network):

  hf download Qwen/Qwen2.5-0.5B --local-dir ckpt/qwen2.5-0.5b
  # MMLU into data/gtca: docs/DOWNSTREAM_DATA.md ("GTCA sets")
  python -m slm_jax.gtca.cache --task=mmlu --data_root=data/gtca --backbone=ckpt/qwen2.5-0.5b \
      --split=auxiliary_train --out=caches/mmlu_qwen.sqlite     # and again without --split
  python -m slm_jax.gtca.train --config=mmlu_qwen
"""

import ml_collections


def get_config():
  config = ml_collections.ConfigDict()
  config.backbone = "ckpt/qwen2.5-0.5b"
  config.task = "mmlu"
  config.data_root = "data/gtca"
  config.cache = "caches/mmlu_qwen.sqlite"
  config.out = "gtca_runs/mmlu_qwen"
  config.methods = ("lora_only", "gtca")
  config.seeds = (0,)
  config.train_items = 2000
  config.test_items = 0  # every labeled test row
  return config
