"""The offline parse stage: raw text (FineWeb-Edu Parquet, JSONL, text) → documents of PTB trees.

`python -m slm_jax.parse` (see `__main__`); modules: `readers` (documents in work units),
`splitting` (sentences, PTB tokens), `backends` (benepar, pass-through, flat), `stage` (sharding,
resume, cache, report).
"""

from slm_jax.parse.backends import (BeneparBackend, FlatBackend, ModelNotFoundError, ParseFailure,
                                    ParserBackend, PassThroughBackend, make_backend)
from slm_jax.parse.stage import ShardResult, StageOptions, merged_report, run_shard

__all__ = ["BeneparBackend", "FlatBackend", "ModelNotFoundError", "ParseFailure", "ParserBackend",
           "PassThroughBackend", "make_backend", "ShardResult", "StageOptions", "merged_report",
           "run_shard"]
