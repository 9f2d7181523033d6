"""GTCA — gated tree cross-attention on a frozen checkpoint (SPEC §10, seed `001_…`).

Data side: `prompts` (MCQA / single-sentence prompts, field ranges, token offsets, the update mask
m_t), `spans` (parser words → token ranges, the input's span tree, heights → the per-layer chunk
layout `ChunkBatch`), `parse_cache` (the SQLite parse cache keyed by the token ids) and
`cache_builder` (filling it), `batches` (encoded rows → padded arrays + chunk layout). Model side:
`branch` (the gated cross-attention) and `model.GtcaLM` (the backbone with the branch; its own
`loss_sums`). Then `stages` (one stage through `train.steps.make_train_step`), `runs` (a run,
restored), `scoring`, `metrics`, `report` (tables), `real_sets`, and the UUAS probe
(`structural_probe`, `probe_trees`, `probe_gtca`). The CLIs `train`, `evaluate`, `probe` and
`cache` parse arguments and call those.
"""
