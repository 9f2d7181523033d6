"""The file rules (`slm_jax.files`, issue #47): lines split on "\\n" only, atomic output files
whose failures name the file, folders replaced whole; a full disk as one line naming the file
(`cli.full_disk`); and no reader of a user's text file splits on the other line separators."""

from __future__ import annotations

import ast
import errno
import os
import pathlib
import sys
import threading
import types
import warnings

import pytest

from slm_jax import cli, cli_errors, files

ROOT = pathlib.Path(__file__).resolve().parents[1]
SEPARATORS = "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"  # str.splitlines splits on every one


def test_lines_split_on_newline_only():
  text = f"one{SEPARATORS}still one\r\ntwo\n\nfour"
  assert files.text_lines(text) == [f"one{SEPARATORS}still one", "two", "", "four"]
  assert len(text.splitlines()) == 4 + len(SEPARATORS)  # what the readers did before
  assert files.text_lines("a\n") == ["a"] and files.text_lines("") == []


def test_read_and_iter_lines_agree_and_name_bad_bytes(tmp_path):
  path = tmp_path / "in.txt"
  path.write_bytes("\ufeffa\u2028b\r\nc\x85d\nlast".encode())
  assert files.read_lines(path) == ["a\u2028b", "c\x85d", "last"]
  assert [line for _, line in files.iter_lines(path)] == files.read_lines(path)
  path.write_bytes(b"fine\ncaf\xe9 latin-1\n")
  with pytest.raises(cli.CliError, match=rf"{path}:2: invalid UTF-8 at byte 8"):
    list(files.iter_lines(path))


class FullDisk:
  """An open file whose writes fail as on a full disk (the error names no file)."""

  def __init__(self, handle):
    self.handle = handle

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.handle.close()

  def write(self, data):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

  def close(self):
    self.handle.close()


def fill_disk(monkeypatch) -> None:
  """From now on a file opened for writing through `Path.open` fails its writes (ENOSPC)."""
  real = pathlib.Path.open

  def opened(self, mode="r", *args, **kwargs):
    handle = real(self, mode, *args, **kwargs)
    return FullDisk(handle) if "w" in mode or "a" in mode else handle

  monkeypatch.setattr(pathlib.Path, "open", opened)


def test_a_failed_write_keeps_the_old_file_leaves_no_temporary_and_names_it(tmp_path,
                                                                             monkeypatch):
  path = tmp_path / "summary.json"
  path.write_bytes(b"old")
  fill_disk(monkeypatch)
  with pytest.raises(OSError) as error:
    files.write_text(path, "new")
  assert cli.describe_error(error.value) == f"No space left on device: {path}"
  assert path.read_bytes() == b"old" and sorted(os.listdir(tmp_path)) == ["summary.json"]
  with pytest.raises(OSError) as error:
    files.write_text(tmp_path / "tables.md", "x")
  assert not (tmp_path / "tables.md").exists()  # never a 0-byte file
  with pytest.raises(OSError, match="items.jsonl"):
    with files.appending(tmp_path / "items.jsonl") as sink:
      sink.write("{}\n")


def test_replace_folder_leaves_nothing_of_the_old_content(tmp_path):
  out = tmp_path / "export"
  out.mkdir()
  for name in ("model-00001-of-00002.safetensors", "model.safetensors.index.json", "x.txt"):
    (out / name).write_text("another model")
  with pytest.raises(cli.CliError, match="exists and is not empty; pass --force"):
    files.check_replaceable(out, force=False)
  with pytest.raises(RuntimeError):  # a failed export: the old folder stays as it was
    with files.replace_folder(out, force=True) as folder:
      (folder / "config.json").write_text("{}")
      raise RuntimeError("killed")
  assert sorted(p.name for p in out.iterdir())[0] == "model-00001-of-00002.safetensors"
  with files.replace_folder(out, force=True) as folder:
    (folder / "model.safetensors").write_text("this model")
  assert [p.name for p in out.iterdir()] == ["model.safetensors"]
  assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]  # no temporary left


def test_a_full_disk_is_one_line_naming_the_file():
  tensorstore = ValueError(
      'RESOURCE_EXHAUSTED: Error writing "opt_state.1.0.count/0" in OCDBT database at local file '
      '"/w/run/checkpoints/2.orbax-checkpoint-tmp/state/ocdbt.process_0/": Failed writing: '
      '"/w/run/checkpoints/2.orbax-checkpoint-tmp/state/ocdbt.process_0/d/9bcd": Failed to write '
      "227774 bytes to file 9: No space left on device [os_error_code='28'] [source_locations="
      "'tensorstore/internal/os/file_util_posix.cc:244']")
  wrapped = RuntimeError("save failed")
  wrapped.__cause__ = tensorstore
  line = "No space left on device: /w/run/checkpoints/2.orbax-checkpoint-tmp/state/ocdbt.process_0/d/9bcd"
  assert cli.full_disk(wrapped) == line == cli.describe_error(tensorstore)
  assert cli.full_disk(ValueError("other")) is None

  def write_text(self):  # a library's Path.write_text: the error names no file
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

  try:
    write_text(pathlib.Path("/w/run/extra/metadata"))
  except OSError as error:
    assert cli.full_disk(error) == "No space left on device: /w/run/extra/metadata"


def test_echoes_of_a_reported_full_disk_print_nothing(monkeypatch, capsys):
  monkeypatch.setattr(cli_errors, "_FULL_DISK", {"reported": False, "warned": False})
  monkeypatch.setattr(threading, "excepthook", threading.excepthook)
  monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)

  def main(_):
    def flush():
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/w/events")
    for _ in range(3):  # a writer thread failing again and again: one warning line
      thread = threading.Thread(target=flush, name="writer")
      thread.start()
      thread.join()
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/w/metrics.jsonl")

  assert cli.run(main, []) == cli.EXIT_USAGE
  closed = OSError("handle is closed")  # the writer's flush at exit, after the error line
  sys.unraisablehook(types.SimpleNamespace(exc_type=OSError, exc_value=closed, err_msg=None,
                                           exc_traceback=None, object=None))
  assert capsys.readouterr().err.splitlines() == [
      "warning: No space left on device: /w/events (a background write, thread writer)",
      "error: No space left on device: /w/metrics.jsonl"]


def test_unawaited_writes_of_a_reported_full_disk_print_nothing(monkeypatch):
  """An Orbax save that failed on a full disk can leave its async write coroutines unawaited;
  collected at exit they warned "coroutine … was never awaited" after the one error line."""
  monkeypatch.setattr(cli_errors, "_FULL_DISK", {"reported": False, "warned": False})
  monkeypatch.setattr(threading, "excepthook", threading.excepthook)
  monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)

  def main(_):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/w/checkpoints/2/_METADATA")

  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    warnings.warn("coroutine 'write' was never awaited", RuntimeWarning)  # before: shown
    assert cli.run(main, []) == cli.EXIT_USAGE
    warnings.warn("coroutine 'write_fragment' was never awaited", RuntimeWarning)
    warnings.warn("another warning", RuntimeWarning)
  assert [str(w.message) for w in caught] == ["coroutine 'write' was never awaited",
                                              "another warning"]


def _splitlines_calls(path: pathlib.Path) -> list[int]:
  tree = ast.parse(path.read_text(encoding="utf-8"))
  return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
          and isinstance(node.func, ast.Attribute) and node.func.attr == "splitlines"]


# str.splitlines on text that is not a user's file: error messages and summaries of our own,
# package data, tool output.
NOT_USER_TEXT = {"cli_errors.py", "train/checkpointing.py", "explain.py", "data/documents.py",
                 "data/tfds_corpus.py", "data/pack_iter.py", "tokenizer_bases.py",
                 "kernels/triton_kernels.py",
                 "kernels/mosaic_compile.py"}  # compiler messages, not user text


def test_no_reader_of_user_text_splits_on_other_line_separators():
  package = ROOT / "slm_jax"
  found = {str(p.relative_to(package)): _splitlines_calls(p) for p in package.rglob("*.py")}
  readers = {name: lines for name, lines in found.items() if lines and name not in NOT_USER_TEXT}
  assert readers == {}, "use slm_jax.files.text_lines / read_lines / iter_lines"
