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
  assert not path.with_name("record.json.partial").exists()
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
