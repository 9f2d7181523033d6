"""The default's recipe (cosine, POS head) on a wider, deeper encoder; not yet run on an
accelerator."""


def get_config():
  return {
      "model": {"char_filters": 256, "word_dim": 300, "hidden": 400, "layers": 3,
                "mlp_dim": 500},
      "batch_words": 3000, "max_train_words": 304, "max_epochs": 60, "patience": 8,
      "schedule": "cosine", "tag_weight": 0.5,
  }
