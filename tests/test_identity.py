"""The one identity rule: nested records compared key by key, differences named one way,
records written atomically and read with errors naming the file."""

from __future__ import annotations

import pytest

from slm_jax import identity


def test_differences_flatten_nested_records_and_skip_ignored_keys():
  saved = {"settings": {"lr": 0.1, "log_every": 10, "buckets": [8, 16]}, "seed": 1}
  now = {"settings": {"lr": 0.2, "log_every": 5, "buckets": (8, 16)}, "seed": 1, "rows": 3}
  assert identity.differences(saved, now, ignore={"settings.log_every"}) == [
      ("rows", None, 3), ("settings.lr", 0.1, 0.2)]
  assert identity.describe(identity.differences(saved, now, {"rows", "settings.log_every"}),
                           "in the folder") == "settings.lr: 0.1 in the folder, 0.2 now"


def test_check_record_reads_compares_and_names_the_file(tmp_path):
  path = tmp_path / "record.json"
  kwargs = dict(what="F holds another thing", where="there", hint="use another folder")
  assert identity.check_record(path, {"a": 1}, **kwargs) is False  # nothing recorded yet
  identity.write_record(path, {"a": 1, "b": {"c": 2}})
  assert sorted(p.name for p in tmp_path.iterdir()) == ["record.json"]  # no temporary left
  assert identity.check_record(path, {"a": 1, "b": {"c": 2}}, **kwargs) is True
  with pytest.raises(identity.IdentityError,
                     match=r"^F holds another thing \(b.c: 2 there, 3 now\); use another folder$"):
    identity.check_record(path, {"a": 1, "b": {"c": 3}}, **kwargs)
  path.write_text('{"a": ')
  with pytest.raises(identity.IdentityError, match=r"record.json: not a readable record"):
    identity.read_record(path)
  path.write_text("[1]")
  with pytest.raises(identity.IdentityError, match=r"record.json: expected a JSON object"):
    identity.read_record(path)


def test_the_content_digest_reads_sizes_headers_and_samples(tmp_path):
  """THE digest of a checkpoint's contents (issue #47): equal contents, equal digests wherever
  they are; any change of size, of a small file's bytes, of a large file's first MiB or of one of
  its sampled blocks, of a folder's file names, another digest; hidden files are not contents."""
  small = tmp_path / "a" / "model.safetensors"
  small.parent.mkdir()
  small.write_bytes(bytes(range(256)) * 40)
  copy = tmp_path / "b" / "model.safetensors"
  copy.parent.mkdir()
  copy.write_bytes(small.read_bytes())
  assert identity.content_digest(small) == identity.content_digest(copy)
  assert identity.content_digest(small.parent) == identity.content_digest(copy.parent)
  (copy.parent / ".lock").write_text("pid")  # not contents
  assert identity.content_digest(small.parent) == identity.content_digest(copy.parent)
  data = bytearray(small.read_bytes())
  data[5000] ^= 1
  copy.write_bytes(bytes(data))
  assert identity.content_digest(small) != identity.content_digest(copy)
  (copy.parent / "other.json").write_text("{}")
  assert identity.content_digest(copy.parent) != identity.content_digest(copy)
  large = tmp_path / "large.bin"
  content = bytearray(3 * identity.WHOLE_BYTES)
  large.write_bytes(bytes(content))
  before = identity.content_digest(large)
  for offset in (identity.WHOLE_BYTES - 1, len(content) - 1):  # header; the last sampled block
    changed = bytearray(content)
    changed[offset] = 7
    large.write_bytes(bytes(changed))
    assert identity.content_digest(large) != before
  assert identity.content_digest(tmp_path / "none") != identity.content_digest(large)


def test_a_gguf_header_is_hashed_whole_past_the_first_mib(tmp_path):
  """Two GGUF files of one size whose metadata differ only after 1 MiB (a large vocabulary's
  place): the header walk hashes all of it and finds them different."""
  gguf = pytest.importorskip("gguf")
  import numpy as np  # pylint: disable=g-import-not-at-top
  paths = []
  for value in ("one", "two"):
    path = tmp_path / f"{value}.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_string("big", "x" * (3 * identity.WHOLE_BYTES // 2))
    writer.add_string("general.name", value)
    writer.add_tensor("t", np.zeros((4096,), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    paths.append(path)
    with path.open("rb") as handle:
      end = identity._gguf_header_end(handle, path.stat().st_size)
    reader = gguf.GGUFReader(path)
    assert end <= reader.data_offset < end + 32  # the tensor index ends, then alignment
  assert paths[0].stat().st_size == paths[1].stat().st_size
  assert identity.content_digest(paths[0]) != identity.content_digest(paths[1])


def test_a_workdir_step_is_its_checkpoint_and_tokenizer(tmp_path):
  from slm_jax.train.loading import source_digest  # pylint: disable=g-import-not-at-top
  run = tmp_path / "run"
  for step in (2, 4):
    (run / "checkpoints" / str(step) / "state").mkdir(parents=True)
    (run / "checkpoints" / str(step) / "state" / "data").write_bytes(bytes([step]) * 100)
  (run / "config.json").write_text("{}")
  (run / "tokenizer_spec.json").write_text('{"words": ["a"]}')
  step, digest = source_digest(run)
  assert step == 4 and source_digest(run, 4) == (4, digest) and source_digest(run, 2)[1] != digest
  (run / "metrics.jsonl").write_text('{"step": 5}\n')  # training went on: not the step's contents
  (run / "config.json").write_text('{"train": {"steps": 9}}')
  assert source_digest(run) == (4, digest)
  (run / "tokenizer_spec.json").write_text('{"words": ["b"]}')
  assert source_digest(run)[1] != digest
