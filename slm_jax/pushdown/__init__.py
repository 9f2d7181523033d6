"""Pushdown Layers (Murty, Sharma, Andreas, Manning, EMNLP 2023): the architectural reference of
SPEC §14.

A terminal-only decoder whose self-attention is biased by a *stack tape* (the depth of every
earlier token in the incremental parse of the prefix) and whose *attachment head* predicts, with
each next word, which stack element that word's completed constituent reduces with.

- `structure`: silver spans, attachments and stack tapes of packed lin1 rows (vectorized; numpy
  on the host, jax.numpy inside the train step), and the compaction to terminal rows.
- `stack`: the per-token stack (shift / reduce) the inference search carries per hypothesis, and
  the loop oracle from trees the vectorized code is tested against.
- `model`: `PushdownLM` — the decoder with the depth bias plugged in through its `attend` hook,
  the attachment head, and the joint loss.
- `cache`: one decoding step per token through a key/value cache in the decoder's `attend` hook;
  for generation also `prefill` (a whole teacher-forced prompt row), `feed` (the full next-token
  distribution) and `attachments` (several candidate tokens' attachments at once).
- `beam`: scoring one row by a beam over attachment decisions (SPEC §14: beam 300), and
  exhaustive enumeration for short sentences; `beam_batch`: the same beam for many rows in one
  cache (`beam_score_many`, bit for bit `beam.beam_score`).
- `scoring`: the `Scorer`s the evaluators get for Pushdown runs (SG, BLiMP, doc-PPL score them as
  terminal models, the attachments marginalized by the beam; the downstream MC tasks and BoolQ
  teacher-forced with the supplied parser spans, `PushdownTeacherScorer`).
- `generate`: XSum summaries by a joint beam over summary tokens and attachment actions (SPEC §14,
  beam 6), on the summary search's rules (`slm_jax.inference.generate`); `generate_batch`: several
  articles' searches in one cache, bit for bit `generate.joint_generate`.
The package sits at the inference layer (`tests/test_layering.py`): its searches use the inference
engine (`inference.beam`, `inference.beam_batch`, `inference.scorer`, `inference.generate`).

Configuration `pushdown` (`slm_jax.configurations`, `configs/pushdown_*.py`) trains it on the
lin1 rows of the shared data pipeline (`model.pushdown_depths` > 0 selects the model).
"""
