"""GGUF tensor types the importer reads, and their dequantization to float32.

The values come from the `gguf` package (llama.cpp's own Python reader, numpy only):
`gguf.quants.dequantize` unpacks every type in `SUPPORTED` block by block, vectorized over rows
(F32 is a view, F16 and BF16 are widened, Q8_0 / Q4_0 / Q4_1 are `d·q (+ m)` per 32-value block,
Q4_K / Q5_K / Q6_K are super-blocks of 256 values with 6- or 8-bit sub-block scales).
`tests/test_gguf_quant.py` checks each type against a transcription of ggml's C reference
(`dequantize_row_*`) and, where `gguf.quants.quantize` exists, a round trip.

A quantized GGUF tensor is stored row by row (`ne1` rows of `ne0` values, each row a whole
number of blocks), so a slice of rows is read and dequantized on its own (`dequantize_rows`).
Any other type (Q2_K, Q3_K, Q5_0, Q5_1, IQ*, TQ*, MXFP4, …) is refused by name.
"""

from __future__ import annotations

import numpy as np

SUPPORTED = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q5_K", "Q6_K")


def type_name(tensor_type) -> str:
  """The ggml name of a `gguf.GGMLQuantizationType` (or of its integer id)."""
  import gguf  # pylint: disable=import-outside-toplevel
  try:
    return gguf.GGMLQuantizationType(int(tensor_type)).name
  except ValueError:
    return f"type id {int(tensor_type)}"


def check_type(where: str, tensor: str, tensor_type) -> None:
  """Raises ValueError naming `where` (the file), `tensor` and its type unless it is SUPPORTED."""
  name = type_name(tensor_type)
  if name not in SUPPORTED:
    raise ValueError(f"{where}: tensor {tensor} has type {name}, which the GGUF importer does not "
                     f"dequantize (supported: {', '.join(SUPPORTED)})")


def dequantize_rows(data: np.ndarray, tensor_type) -> np.ndarray:
  """float32 values of stored GGUF rows `data` (the reader's array, or a slice of its rows)."""
  import gguf  # pylint: disable=import-outside-toplevel
  values = gguf.quants.dequantize(np.asarray(data), gguf.GGMLQuantizationType(int(tensor_type)))
  return values.astype(np.float32, copy=False)
