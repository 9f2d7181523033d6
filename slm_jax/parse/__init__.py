"""The offline parse stage: raw text (FineWeb-Edu Parquet, JSONL, text) → documents of PTB trees.

`python -m slm_jax.parse` (see `__main__`); modules: `readers` (documents in work units),
`backends` (benepar, pass-through, flat), `slm_backend` (slm_jax's own parser), `stage`
(sharding, resume, cache, report; the merged report is `data.parse_reports`). Sentences and PTB
words come from `slm_jax.splitting`.
"""

from slm_jax.data.parse_reports import merged_report
from slm_jax.parse.backends import (BeneparBackend, FlatBackend, ModelNotFoundError, ParseFailure,
                                    ParserBackend, PassThroughBackend, make_backend)
from slm_jax.parse.stage import ShardResult, StageOptions, run_shard

__all__ = ["BeneparBackend", "FlatBackend", "ModelNotFoundError", "ParseFailure", "ParserBackend",
           "PassThroughBackend", "make_backend", "ShardResult", "StageOptions", "merged_report",
           "run_shard"]
