"""GTCA — gated tree cross-attention on a frozen checkpoint (SPEC §10, seed `001_…`).

Data side: `prompts` (MCQA / single-sentence prompts, field ranges, token offsets, the update mask
m_t), `spans` (parser words → token ranges, the input's span tree, heights → the per-layer chunk
layout `ChunkBatch`), `cache` (the SQLite parse cache keyed by the token ids, and its builder CLI
`python -m slm_jax.gtca.cache`). Model side: the branch and its forward pass; then training,
evaluation and the probe.
"""
