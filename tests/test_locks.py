"""One writer per folder: a live holder refuses a second writer in one line; a dead holder's lock
is taken over with a warning; another host's lock is refused naming the host; re-entrant."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from slm_jax import cli, locks
from slm_jax.locks import FolderInUseError, writer_lock

HOLD = ("import sys, time; from slm_jax.locks import writer_lock\n"
        "with writer_lock(sys.argv[1], what='holding test'):\n"
        "  print('held', flush=True); time.sleep(60)\n")


def test_a_live_holder_refuses_a_second_writer(tmp_path):
  holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE,
                            text=True, cwd=os.path.dirname(os.path.dirname(__file__)))
  try:
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(FolderInUseError) as refused:
      with writer_lock(tmp_path, what="training"):
        pytest.fail("a second writer got the lock")
    message = str(refused.value)
    assert message.startswith(f"{tmp_path}: in use by pid {holder.pid} on {socket.gethostname()}")
    assert "(holding test)" in message and f"kill {holder.pid}" in message
    assert refused.value.exit_code == cli.EXIT_USAGE and "\n" not in message
  finally:
    holder.kill()
    holder.wait()
  with writer_lock(tmp_path, what="training"):  # the killed holder's lock is stale now
    assert locks.read_lock(tmp_path)["pid"] == os.getpid()


def test_a_dead_process_s_lock_is_taken_over_with_a_warning(tmp_path, capsys):
  (tmp_path / ".lock").write_text(json.dumps({"pid": 999999, "host": socket.gethostname(),
                                              "started": "2026-01-01T00:00:00Z", "what": "old"}))
  with writer_lock(tmp_path, what="training") as folder:
    assert folder == tmp_path
    record = locks.read_lock(tmp_path)
    assert record["pid"] == os.getpid() and record["what"] == "training"
    assert record["command"] and record["started"]
  assert "taking over the stale lock of pid 999999" in capsys.readouterr().err
  assert not (tmp_path / ".lock").exists()  # released: the lock file is gone


def test_another_host_s_lock_is_refused_naming_the_host(tmp_path):
  (tmp_path / ".lock").write_text(json.dumps({"pid": 12, "host": "node-7", "started": "T",
                                              "what": "evaluation"}))
  with pytest.raises(FolderInUseError, match=r"in use by pid 12 on node-7 since T "
                     r"\(evaluation\); .*delete .*\.lock and rerun"):
    with writer_lock(tmp_path, what="training"):
      pass
  assert json.loads((tmp_path / ".lock").read_text())["host"] == "node-7"  # left as it was


def test_nested_locks_of_one_process_and_missing_folders(tmp_path):
  folder = tmp_path / "a" / "b"
  with writer_lock(folder, what="outer"):
    with writer_lock(folder, what="inner"):
      assert locks.read_lock(folder)["what"] == "outer"
    assert (folder / ".lock").exists()
  assert not folder.exists() and (tmp_path / "a").is_dir()  # made by the lock, left empty
  with writer_lock(folder, what="writer"):
    (folder / "result.json").write_text("{}")
  assert (folder / "result.json").exists() and not (folder / ".lock").exists()


def test_a_file_where_the_folder_goes_is_one_line(tmp_path):
  path = tmp_path / "run"
  path.write_text("x")
  with pytest.raises(cli.CliError, match=r"run: is a file, not a folder"):
    with writer_lock(path, what="training"):
      pass


def test_the_lock_is_released_when_the_block_fails(tmp_path):
  with pytest.raises(RuntimeError):
    with writer_lock(tmp_path, what="training"):
      raise RuntimeError("boom")
  started = time.monotonic()
  with writer_lock(tmp_path, what="again"):
    assert time.monotonic() - started < 1


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder_is_one_line(tmp_path):
  folder = tmp_path / "out"
  folder.mkdir()
  folder.chmod(0o500)
  try:
    with pytest.raises(cli.CliError, match=r"out: cannot write there \(Permission denied\)"):
      with writer_lock(folder, what="fine-tuning"):
        pass
  finally:
    folder.chmod(0o700)


def test_shares_of_one_folder_lock_apart(tmp_path):
  with writer_lock(tmp_path, what="prepare", part="0-of-2"):
    with writer_lock(tmp_path, what="prepare", part="1-of-2"):
      assert locks.read_lock(tmp_path, "1-of-2")["what"] == "prepare"
    assert (tmp_path / ".lock.0-of-2").exists() and not (tmp_path / ".lock.1-of-2").exists()
