"""Collection order for the two xdist workers (`-n 2 --dist loadfile`, pyproject addopts).

loadfile hands whole files to the workers in collection order, so a long file collected last
runs alone at the end while the other worker idles. The files that take longest on 2 cores
(measured with `--durations`) are collected first; every other file keeps pytest's order.
"""

from __future__ import annotations

LONGEST_FIRST = (
    "test_multiprocess.py", "test_notebook.py", "test_evaluate_cli.py", "test_live_eval.py",
    "test_downstream_generate.py", "test_train.py", "test_parser_crf.py", "test_gtca_evaluate.py",
    "test_downstream_scoring.py", "test_lora.py", "test_workdir.py", "test_aot.py",
    "test_downstream_finetune.py", "test_beam_pipelines.py", "test_restore_mesh.py",
)


def pytest_collection_modifyitems(session, config, items):
  del session, config
  rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
  items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep order
