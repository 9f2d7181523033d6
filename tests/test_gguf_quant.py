"""GGUF dequantization (`slm_jax.hf.gguf_quant`) checked type by type against scalar
transcriptions of ggml's C reference (`ggml-quants.c: dequantize_row_*`), on random blocks; the
types gguf can quantize also round-trip; a slice of rows dequantizes alone; other types are
refused by name."""

from __future__ import annotations

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from slm_jax.hf.gguf_quant import SUPPORTED, check_type, dequantize_rows  # noqa: E402

F16 = lambda block, at: float(block[at:at + 2].view(np.float16)[0])  # noqa: E731


def _scale_min_k4(j: int, q: np.ndarray) -> tuple[int, int]:
  """ggml get_scale_min_k4: the 6-bit scale and min of sub-block j from the 12 scale bytes."""
  q = q.astype(np.int64)
  if j < 4:
    return q[j] & 63, q[j + 4] & 63
  return (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4)


def ref_q8_0(b):
  d = F16(b, 0)
  return [d * int(v) for v in b[2:34].view(np.int8)]


def ref_q4_0(b):
  d, qs = F16(b, 0), b[2:18].astype(np.int64)
  return [((qs[j] & 0xF) - 8) * d for j in range(16)] + [((qs[j] >> 4) - 8) * d
                                                         for j in range(16)]


def ref_q4_1(b):
  d, m, qs = F16(b, 0), F16(b, 2), b[4:20].astype(np.int64)
  return [(qs[j] & 0xF) * d + m for j in range(16)] + [(qs[j] >> 4) * d + m for j in range(16)]


def ref_q4_k(b):
  d, dmin, scales, q = F16(b, 0), F16(b, 2), b[4:16], b[16:144].astype(np.int64)
  out = []
  for j in range(0, 256, 64):
    sc1, m1 = _scale_min_k4(j // 32, scales)
    sc2, m2 = _scale_min_k4(j // 32 + 1, scales)
    qs = q[j // 2:j // 2 + 32]
    out += [d * sc1 * (v & 0xF) - dmin * m1 for v in qs]
    out += [d * sc2 * (v >> 4) - dmin * m2 for v in qs]
  return out


def ref_q5_k(b):
  d, dmin, scales = F16(b, 0), F16(b, 2), b[4:16]
  qh, ql = b[16:48].astype(np.int64), b[48:176].astype(np.int64)
  out, u1, u2 = [], 1, 2
  for j in range(0, 256, 64):
    sc1, m1 = _scale_min_k4(j // 32, scales)
    sc2, m2 = _scale_min_k4(j // 32 + 1, scales)
    qs = ql[j // 2:j // 2 + 32]
    out += [d * sc1 * ((v & 0xF) + (16 if h & u1 else 0)) - dmin * m1 for v, h in zip(qs, qh)]
    out += [d * sc2 * ((v >> 4) + (16 if h & u2 else 0)) - dmin * m2 for v, h in zip(qs, qh)]
    u1, u2 = u1 << 2, u2 << 2
  return out


def ref_q6_k(b):
  ql, qh = b[0:128].astype(np.int64), b[128:192].astype(np.int64)
  sc, d = b[192:208].view(np.int8).astype(np.int64), F16(b, 208)
  y = [0.0] * 256
  for n in range(2):
    l_, h_, s_ = ql[64 * n:], qh[32 * n:], sc[8 * n:]
    for i in range(32):
      s = i // 16
      q1 = ((l_[i] & 0xF) | (((h_[i] >> 0) & 3) << 4)) - 32
      q2 = ((l_[i + 32] & 0xF) | (((h_[i] >> 2) & 3) << 4)) - 32
      q3 = ((l_[i] >> 4) | (((h_[i] >> 4) & 3) << 4)) - 32
      q4 = ((l_[i + 32] >> 4) | (((h_[i] >> 6) & 3) << 4)) - 32
      for k, q in enumerate((q1, q2, q3, q4)):
        y[128 * n + i + 32 * k] = d * s_[s + 2 * k] * q
  return y


def ref_bf16(b):
  return list((b.view(np.uint16).astype(np.uint32) << 16).view(np.float32))


def ref_f16(b):
  return list(b.view(np.float16).astype(np.float32))


# type -> (values per block, bytes per block, byte offsets of f16 scales, reference)
REFERENCES = {"Q8_0": (32, 34, (0,), ref_q8_0), "Q4_0": (32, 18, (0,), ref_q4_0),
              "Q4_1": (32, 20, (0, 2), ref_q4_1), "Q4_K": (256, 144, (0, 2), ref_q4_k),
              "Q5_K": (256, 176, (0, 2), ref_q5_k), "Q6_K": (256, 210, (208,), ref_q6_k),
              "BF16": (1, 2, (), ref_bf16), "F16": (1, 2, (), ref_f16)}


def random_rows(kind: str, rows: int, per_row: int, seed: int = 0) -> np.ndarray:
  """`rows` rows of `per_row` random blocks of `kind`, finite f16 scales."""
  _, size, scales, _ = REFERENCES[kind]
  rng = np.random.default_rng(seed)
  data = rng.integers(0, 256, (rows * per_row, size), dtype=np.uint8)
  for at in scales:
    data[:, at:at + 2] = rng.uniform(-0.05, 0.05, (len(data), 1)).astype(np.float16).view(np.uint8)
  if kind in ("F16", "BF16"):  # finite values: draw floats, keep their bytes
    floats = rng.standard_normal(len(data)).astype(np.float32)
    data = (floats.astype(np.float16).view(np.uint8) if kind == "F16" else
            (floats.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)).reshape(-1, 2)
  return data.reshape(rows, -1)


def test_every_supported_type_is_checked_here():
  assert set(SUPPORTED) == set(REFERENCES) | {"F32"}


@pytest.mark.parametrize("kind", sorted(REFERENCES))
def test_dequantize_matches_the_c_reference(kind):
  rows = random_rows(kind, rows=3, per_row=2 if REFERENCES[kind][0] > 1 else 64)
  got = dequantize_rows(rows, gguf.GGMLQuantizationType[kind])
  size = REFERENCES[kind][1]
  want = np.array([[v for block in row.reshape(-1, size) for v in REFERENCES[kind][3](block)]
                   for row in rows], np.float64)
  assert got.dtype == np.float32 and got.shape == want.shape
  np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("kind", ["Q8_0", "Q4_0", "Q4_1", "BF16"])
def test_quantize_round_trip(kind):
  values = np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32)
  qtype = gguf.GGMLQuantizationType[kind]
  once = dequantize_rows(gguf.quants.quantize(values, qtype), qtype)
  step = {"Q8_0": 1 / 127, "Q4_0": 1 / 7, "Q4_1": 1 / 15, "BF16": 2 ** -8}[kind]
  assert np.abs(once - values).max() <= step * np.abs(values).max() * 1.01
  # dequantized values are representable: quantizing them again changes nothing
  again = dequantize_rows(gguf.quants.quantize(once, qtype), qtype)
  np.testing.assert_allclose(again, once, rtol=1e-6, atol=1e-7)


def test_rows_dequantize_alone():
  rows = random_rows("Q6_K", rows=5, per_row=2)
  whole = dequantize_rows(rows, gguf.GGMLQuantizationType.Q6_K)
  part = dequantize_rows(rows[[3, 1]], gguf.GGMLQuantizationType.Q6_K)
  np.testing.assert_array_equal(part, whole[[3, 1]])


@pytest.mark.parametrize("kind", ["Q2_K", "Q3_K", "Q5_0", "IQ4_XS"])
def test_other_types_are_refused_by_name(kind):
  with pytest.raises(ValueError, match=f"model.gguf: tensor blk.0.attn_q.weight has type {kind}, "
                     "which the GGUF importer does not dequantize"):
    check_type("model.gguf", "blk.0.attn_q.weight", gguf.GGMLQuantizationType[kind])
  check_type("model.gguf", "blk.0.attn_q.weight", gguf.GGMLQuantizationType.Q6_K)
