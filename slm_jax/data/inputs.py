"""`slm_jax.inputs` under its old name, kept for the callers another change moves (gtca's
cache builder and probe); new code imports `slm_jax.inputs`."""

from slm_jax.inputs import (AUTO, PARSE_INPUTS, PTB_PATTERNS, TREE_INPUTS,  # noqa: F401
                            FormatTable, discover, ptb_files)
