"""A parser of a few thousand parameters for tests: three epochs on small buckets, POS head on."""


def get_config():
  return {
      "model": {"char_dim": 8, "char_filters": 16, "max_word_chars": 12, "word_dim": 16,
                "hidden": 16, "layers": 1, "heads": 2, "ff_dim": 32, "mlp_dim": 16,
                "dropout": 0.1, "max_words": 160},
      "learning_rate": 5e-3, "warmup_steps": 5, "batch_words": 120, "buckets": (8, 16, 32, 64),
      "max_train_words": 64, "min_word_count": 1, "max_epochs": 3, "patience": 2,
      "log_every": 2, "checkpoint_every_s": 1e9, "tag_weight": 0.5,
  }
