"""The document record: round trip (GUM, the embedded treebank), version and corruption checks."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from slm_jax import ptb
from slm_jax.corpus.treebank import generate_documents
from slm_jax.data.records import RecordError, decode_record, encode_record
from slm_jax.linearize import base_sequence
from tests.shared_data import require_shared


def same_base(a, b) -> bool:
  return (a.symbols() == b.symbols() and np.array_equal(a.kinds, b.kinds)
          and np.array_equal(a.sentence, b.sentence) and np.array_equal(a.unit, b.unit))


def test_record_round_trip_on_gum_and_embedded():
  gum = require_shared("gum")
  files = sorted((gum / "const").glob("*.ptb"))[:5]
  documents = ptb.read_documents(files) + generate_documents(5, seed=3)
  for k, document in enumerate(documents):
    base = base_sequence(document)
    record = decode_record(encode_record(base, f"doc{k}"))
    assert record.id == f"doc{k}"
    assert same_base(record.base, base)
    assert record.num_sentences == len(document)
    assert record.trees() == list(document)


def test_record_version_and_corruption_are_rejected():
  data = encode_record(base_sequence(generate_documents(1, seed=0)[0]), "x")
  newer = data[:4] + bytes([2]) + data[5:]
  with pytest.raises(RecordError, match="version 2.*re-run python -m slm_jax.prepare"):
    decode_record(newer)
  with pytest.raises(RecordError, match="not an slm_jax.document record"):
    decode_record(b"JUNK" + data[4:])
  with pytest.raises(RecordError, match="corrupt"):
    decode_record(data + b" extra")
  assert struct.unpack_from("<4sB", data) == (b"SLMD", 1)
