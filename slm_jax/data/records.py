"""The on-disk document record: `encode_record` / `decode_record`, `DocumentRecord`, `RecordError`.

Record format `slm_jax.document` version 1 (one record per document, little-endian): the document's
word-level lin1 base sequence (`linearize.base_sequence`: `<s> (S Cats (VP chase mice VP) S) …
</s>`), which every configuration derives from, so one prepared corpus serves every
linearization and tokenizer:
  header  24 bytes: magic b"SLMD", u8 version (1), 3 zero bytes, u32 T (tokens), u32 S
          (sentences), u32 I (id bytes), u32 Y (symbol bytes)
  u32[S]  tokens per sentence (BOS counts with the first sentence, EOS with the last)
  i8[T]   kinds (`slm_jax.kinds.Kind`: BOS, TERMINAL, ONT, CNT, EOS)
  I bytes document id, UTF-8
  Y bytes the T symbols, UTF-8, joined by single spaces (PTB words never contain whitespace)
Decoding is a split and two `frombuffer`s (no tree parsing on the training hot path);
`DocumentRecord.trees()` gives the trees back (`delinearize`). The folders of records that
`python -m slm_jax.prepare` writes, and `DocumentSource`, are in `slm_jax.data.documents`.
"""

from __future__ import annotations

import dataclasses
import struct

import numpy as np

from slm_jax.linearize import Sequence, delinearize
from slm_jax.trees import Tree

RECORD_FORMAT = "slm_jax.document"
RECORD_VERSION = 1
MAGIC = b"SLMD"
_HEADER = struct.Struct("<4sB3xIIII")


class RecordError(ValueError):
  """A record that is not an `slm_jax.document` record of a supported version."""


@dataclasses.dataclass(frozen=True)
class DocumentRecord:
  """A decoded record: document id and its word-level lin1 base sequence."""

  id: str
  base: Sequence

  @property
  def num_sentences(self) -> int:
    return int(self.base.sentence[-1]) + 1 if len(self.base) else 0

  def trees(self) -> list[Tree]:
    return delinearize(self.base.symbols(), self.base.kinds, "lin1")


def encode_record(base: Sequence, doc_id: str = "") -> bytes:
  """Serializes a word-level lin1 base sequence (see the module docstring for the layout)."""
  symbols = [str(s) for s in base.tokens.tolist()]
  text = " ".join(symbols)
  if len(text.split(" ")) != len(symbols) or any(not s for s in symbols):
    bad = next(s for s in symbols if not s or any(c.isspace() for c in s))
    raise RecordError(f"document {doc_id!r}: symbol {bad!r} is empty or contains whitespace")
  lengths = np.bincount(base.sentence, minlength=int(base.sentence[-1]) + 1).astype("<u4")
  id_bytes, symbol_bytes = doc_id.encode("utf-8"), text.encode("utf-8")
  header = _HEADER.pack(MAGIC, RECORD_VERSION, len(base), len(lengths), len(id_bytes),
                        len(symbol_bytes))
  return b"".join([header, lengths.tobytes(), base.kinds.astype(np.int8).tobytes(), id_bytes,
                   symbol_bytes])


def decode_record(data: bytes) -> DocumentRecord:
  if len(data) < _HEADER.size or data[:4] != MAGIC:
    raise RecordError(f"not an {RECORD_FORMAT} record (magic {data[:4]!r}, {len(data)} bytes)")
  _, version, n_tokens, n_sentences, n_id, n_symbols = _HEADER.unpack_from(data)
  if version != RECORD_VERSION:
    raise RecordError(f"{RECORD_FORMAT} record version {version}; this slm_jax reads version "
                      f"{RECORD_VERSION} (re-run python -m slm_jax.prepare)")
  offset = _HEADER.size
  lengths = np.frombuffer(data, "<u4", n_sentences, offset)
  offset += 4 * n_sentences
  kinds = np.frombuffer(data, np.int8, n_tokens, offset).copy()
  offset += n_tokens
  doc_id = data[offset:offset + n_id].decode("utf-8")
  offset += n_id
  symbols = data[offset:offset + n_symbols].decode("utf-8").split(" ")
  if len(symbols) != n_tokens or offset + n_symbols != len(data):
    raise RecordError(f"record {doc_id!r} is corrupt: {len(symbols)} symbols for {n_tokens} "
                      f"kinds, {len(data) - offset - n_symbols} stray bytes")
  tokens = np.empty(n_tokens, dtype=object)
  tokens[:] = symbols
  sentence = np.repeat(np.arange(n_sentences, dtype=np.int32), lengths)
  return DocumentRecord(doc_id, Sequence(tokens, kinds, sentence,
                                         np.arange(n_tokens, dtype=np.int32)))
