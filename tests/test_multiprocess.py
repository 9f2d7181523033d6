"""The pod path on one machine: two training processes (`jax.distributed` over localhost, CPU
collectives through gloo) with a (data 2, fsdp 2) mesh across both, each reading its share of the
Grain pipeline; one is killed mid-run, both are restarted, and the loss curve equals one process
training on the same global batches (the two hosts' shares, read in one process)."""

from __future__ import annotations

import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from slm_jax.corpus import treebank
from slm_jax.data import grain_pipeline
from slm_jax.data.documents import prepare
from slm_jax.data.loader import Batch
from slm_jax.structure import RowMetadata
from slm_jax.train import trainer
from tests import xla_env
from tests.test_train import SMALL, losses, small_config

ROOT = pathlib.Path(__file__).resolve().parents[1]
STEPS = 10
SETTINGS = {**SMALL, "data.source": "arrayrecord", "data.worker_count": 0,
            "train.checkpoint_every": 3, "train.steps": STEPS}
KILL_AFTER = 5  # logged steps before process 1 is killed (a checkpoint at 3 exists by then)


def _prepared(tmp_path: pathlib.Path) -> pathlib.Path:
  trees = tmp_path / "trees.jsonl"
  with trees.open("w") as f:
    for k, document in enumerate(treebank.generate_documents(120, seed=5)):
      f.write(json.dumps({"id": f"doc{k}", "trees": [t.to_bracketed() for t in document]}) + "\n")
  out = tmp_path / "prepared"
  prepare([trees], out)
  return out


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _start_pair(workdir: pathlib.Path, data: pathlib.Path, logs: pathlib.Path, run: int):
  port = _free_port()
  settings = {**SETTINGS, "data.paths": f"('{data}',)", "mesh.fsdp": 2}
  command = [sys.executable, "-m", "slm_jax.main", "--config=configs/tgtree_tiny.py",
             f"--workdir={workdir}"] + [f"--config.{k}={v}" for k, v in settings.items()]
  processes = []
  for index in range(2):
    env = xla_env.child_env(devices=2)
    env.update(JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES="2",
               JAX_PROCESS_ID=str(index))
    log = (logs / f"run{run}-process{index}.log").open("w")
    processes.append(subprocess.Popen(command, cwd=ROOT, env=env, stdout=log,
                                      stderr=subprocess.STDOUT))
  return processes


def _log(logs: pathlib.Path, run: int, index: int) -> str:
  return (logs / f"run{run}-process{index}.log").read_text()


def _committed_steps(workdir: pathlib.Path) -> list[int]:
  """The checkpoint steps Orbax has committed (their folders renamed from the temporary name)."""
  folder = workdir / "checkpoints"
  if not folder.exists():
    return []
  return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())


def _wait_all(processes, logs: pathlib.Path, run: int, timeout: float = 300) -> None:
  """Waits for every process to succeed; the first failure (its peer then hangs in a
  collective) or the timeout kills the others and fails with the failing process's log."""
  deadline = time.time() + timeout
  try:
    while time.time() < deadline and any(p.poll() is None for p in processes):
      failed = [i for i, p in enumerate(processes) if p.poll() not in (None, 0)]
      assert not failed, _log(logs, run, failed[0])[-4000:]
      time.sleep(0.2)
    assert all(p.poll() == 0 for p in processes), "timed out: " + _log(logs, run, 0)[-3000:]
  finally:
    for p in processes:
      if p.poll() is None:
        p.kill()
      p.wait()


class _BothHosts:
  """The batches of two hosts' pipelines, side by side: the global batch of a 2-host run."""

  def __init__(self, iterators):
    self.iterators = iterators

  def __next__(self) -> Batch:
    parts = [next(it) for it in self.iterators]
    join = lambda *xs: np.concatenate(xs)
    return Batch(join(*(b.tokens for b in parts)),
                 RowMetadata(*map(join, *(b.meta for b in parts))),
                 join(*(b.targets for b in parts)))

  def get_state(self):
    return [it.get_state() for it in self.iterators]

  def set_state(self, state):
    for it, part in zip(self.iterators, state):
      it.set_state(part)


def _one_process_reference(workdir: pathlib.Path, data: pathlib.Path, monkeypatch):
  make = grain_pipeline.make_train_iterator

  def both_hosts(cfg, tokenizer, configuration, **_):
    pair = [make(cfg, tokenizer, configuration, process_index=i, process_count=2)[0]
            for i in range(2)]
    return _BothHosts(pair), "both hosts' shares in one process"

  monkeypatch.setattr(grain_pipeline, "make_train_iterator", both_hosts)
  cfg = small_config("tgtree", STEPS, **{k: v for k, v in SETTINGS.items() if k not in SMALL},
                     **{"data.paths": (str(data),)})
  trainer.train(cfg, workdir)


def test_two_processes_killed_and_restarted_match_one_process(tmp_path, monkeypatch):
  data = _prepared(tmp_path)
  logs = tmp_path / "logs"
  logs.mkdir()
  workdir = tmp_path / "two"
  first = _start_pair(workdir, data, logs, 0)
  deadline = time.time() + 300
  metrics = workdir / "metrics.jsonl"
  try:
    while time.time() < deadline and all(p.poll() is None for p in first):
      if (metrics.exists() and len(metrics.read_text().splitlines()) >= KILL_AFTER
          and _committed_steps(workdir)):  # the async save of step 3 may still be in flight
        break
      time.sleep(0.05)
    assert all(p.poll() is None for p in first), _log(logs, 0, 0)[-3000:] + _log(logs, 0, 1)[-3000:]
    os.kill(first[1].pid, signal.SIGKILL)  # a host dies; its peer is stuck in a collective
    time.sleep(1)
  finally:
    for p in first:
      if p.poll() is None:
        p.kill()
      p.wait()
  out0 = _log(logs, 0, 0)
  assert "process 0 of 2, 4 devices" in out0 and "{'data': 2, 'fsdp': 2}" in out0, out0[-3000:]
  interrupted = len(losses(workdir))
  assert KILL_AFTER <= interrupted < STEPS

  second = _start_pair(workdir, data, logs, 1)
  _wait_all(second, logs, 1)
  # The kill lands after KILL_AFTER logged steps, but the pair may have run on (and committed
  # the checkpoint of step 9) before the signal: any checkpoint step up to the last logged one.
  resumed = re.findall(r"resumed from step (\d+)", _log(logs, 1, 0))
  assert resumed and int(resumed[0]) in (3, 6, 9) and int(resumed[0]) <= interrupted, (
      resumed, interrupted, _log(logs, 1, 0)[-3000:])
  assert "host 1/2" in _log(logs, 1, 1)  # process 1 read its own share

  reference = tmp_path / "one"
  _one_process_reference(reference, data, monkeypatch)
  want, got = losses(reference), losses(workdir)
  assert [s for s, _ in got] == list(range(1, STEPS + 1))
  np.testing.assert_allclose([l for _, l in got], [l for _, l in want], rtol=2e-5)
