"""Padded sizes for jitted shapes: the one bucketing policy (rows, lengths, cache slots).

A jitted function compiles once per shape, so variable sizes (tokens in a row, hypotheses fed in a
beam step, cache slots read) are padded up to a bucket: `least`·{1, 1.5, 2, 3, 4, 6, 8, …} (every
power of two and one midpoint between neighbours), at most `cap`. Padding wastes at most a third
of a bucket, and a size range [least, cap] has 2·log2(cap/least) + 1 buckets.
"""

from __future__ import annotations


def bucket(n: int, least: int = 16, cap: int | None = None) -> int:
  """The smallest bucket ≥ n (`least`·{1, 1.5, 2, 3, …}), at most `cap`."""
  if least < 1:
    raise ValueError(f"bucket: least must be >= 1, got {least}")
  size, power = least, least
  while size < n:
    midpoint = power * 3 // 2
    size = midpoint if size == power and midpoint > power else 2 * power
    if size == 2 * power:
      power = size
  return size if cap is None else min(cap, size)


def buckets(cap: int, least: int = 16) -> list[int]:
  """Every size `bucket(·, least, cap)` returns, ascending."""
  sizes = [min(cap, least)]
  while sizes[-1] < cap:
    sizes.append(bucket(sizes[-1] + 1, least, cap))
  return sizes
