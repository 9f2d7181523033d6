"""The test run's XLA flags (tests/xla_env.py) and shared compilation cache, and the collection
order for the two xdist workers (`-n 2 --dist loadfile`, pyproject addopts).

loadfile hands whole files to the workers in collection order, so a long file collected last
runs alone at the end while the other worker idles. The files that take longest on 2 cores
(measured with `--durations`) are collected first; every other file keeps pytest's order.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import jax

from tests import xla_env

xla_env.use_test_flags()  # before any test starts JAX's backend (tests/xla_env.py)

# One JAX persistent compilation cache per test run, shared by both xdist workers and by the
# subprocesses tests start (they inherit the environment): most tests build the same tiny
# models, and identical programs then compile once per run instead of once per test. Every
# entry is kept (no minimum compile time or size). The controller makes the folder before the
# workers start (they inherit SLM_TEST_JIT_DIR) and removes it at the end, so no state survives
# from one run to the next. SLM_TEST_JAX_CACHE=0 turns it off (to measure what it saves).
_OWNER = "SLM_TEST_JIT_DIR" not in os.environ
if _OWNER:
  os.environ["SLM_TEST_JIT_DIR"] = tempfile.mkdtemp(prefix="slm_jax_test_jit_")
CACHE_DIR = os.environ["SLM_TEST_JIT_DIR"]
if os.environ.get("SLM_TEST_JAX_CACHE", "1") == "1":
  os.environ.update(JAX_COMPILATION_CACHE_DIR=CACHE_DIR,
                    JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                    JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
  jax.config.update("jax_compilation_cache_dir", CACHE_DIR)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def pytest_sessionfinish(session, exitstatus):
  del session, exitstatus
  if _OWNER:  # the controller (or a run without xdist), not a worker
    shutil.rmtree(CACHE_DIR, ignore_errors=True)


LONGEST_FIRST = (
    "test_multiprocess.py", "test_notebook.py", "test_evaluate_cli.py", "test_live_eval.py",
    "test_generate.py", "test_train.py", "test_parser_crf.py", "test_gtca_evaluate.py",
    "test_downstream_scoring.py", "test_lora.py", "test_workdir.py", "test_aot.py",
    "test_downstream_finetune.py", "test_beam_pipelines.py", "test_restore_mesh.py",
)


def pytest_collection_modifyitems(session, config, items):
  del session, config
  rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
  items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep order
