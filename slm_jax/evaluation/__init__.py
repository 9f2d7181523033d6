"""One evaluation of trained runs (the library of `python -m slm_jax.evaluate`).

It sits above the evaluators it combines — `slm_jax.eval` (SyntaxGym, BLiMP, doc-PPL, bootstrap,
reports) and `slm_jax.downstream` (multiple choice, XSum, BoolQ) — so neither imports the other's
run logic: `config` (`EvaluationConfig`, the typed settings every function here takes, or a
section of them; packaged `configs/` paper and spec), `run` (the whole evaluation, per run, and
the downstream part), `inputs` (every input checked before anything is scored), `sources` (the
proposal sources the config chooses), `summary`
(conventions, SG layout, the paired bootstrap of the syntactic tasks, notes).
"""
