"""`slm_jax.splitting` under its old name, kept for the callers another change moves (gtca's
spans and cache builder); new code imports `slm_jax.splitting`."""

from slm_jax.splitting import Sentence, Splitter, default_splitter, ptb_words  # noqa: F401
