"""Multiple-choice prompts as raw text for a pretrained checkpoint (SPEC §13;
lm-evaluation-harness's `loglikelihood` of a (context, continuation) pair).

`RawTextEncoder(tokenizer, prefix_id).encode(components)` → `downstream.encoding.Encoded`, so
`downstream.scoring` scores a checkpoint's options with the same rules as a trained model's:
- the text: the components joined as written — the continuation keeps its leading space, which is
  lm-eval's context + " " + continuation — and tokenized in one piece by the checkpoint's own
  tokenizer, no special tokens added, no PTB word split, no chat template;
- the spans: a token belongs to the component holding its last character
  (`raw_text.token_regions`), so the continuation's score sums the log-probs of the tokens of its
  characters (lm-eval takes the tokens after the context's own encoding: the same tokens
  whenever the context's last token does not merge across the boundary; a token that starts in
  one component and ends in the next is counted in `stats["straddling_tokens"]`);
- the prefix: the checkpoint's BOS when its tokenizer adds one (`add_bos`), else none — the
  context's first token is then conditioned on nothing and, as context, never scored — except
  that a prompt with nothing before its continuation follows the prefix token
  (`raw_text.prefix_id`: lm-eval's rule for an empty context). This holds in the paper format
  too: the paper code's "no BOS" (`downstream.paper_query`) is how it encodes a trained SLM's
  query; a checkpoint is scored as lm-eval scores it (SPEC §13).
Every token is kind TERMINAL (the prefix BOS), so an option's S_full equals its S_term.
"""

from __future__ import annotations

from typing import Any, Sequence as SequenceT

import numpy as np

from slm_jax.downstream.encoding import Encoded
from slm_jax.eval.raw_text import token_regions
from slm_jax.kinds import Kind
from slm_jax.linearize import Sequence


class RawTextEncoder:
  """Prompt components → `Encoded` as raw text (module docstring)."""

  with_trees = False  # no tree source is read
  scheme = "raw text"  # what the item files record as the encoding
  paper = False  # the paper code's query rules (`paper_query`) concern a trained SLM's tokens

  def __init__(self, tokenizer: Any, prefix_id: int):
    self.tokenizer = tokenizer  # hf.tokenizer.CheckpointTokenizer
    self.prefix_id = int(prefix_id)
    self.add_bos = bool(tokenizer.add_bos) and tokenizer.bos_id is not None
    self.stats: dict[str, int] = {"straddling_tokens": 0}

  def summary_counters(self, joint_format: bool) -> dict:
    """What a task's summary reports of this encoding: tokens straddling two components (any
    format: raw text has no joint parse units)."""
    del joint_format
    return {"raw_text": dict(self.stats)}

  def encode(self, components: SequenceT[str], joint: Any = None) -> Encoded:
    """The prompt's ids (prefix first when there is one) and each token's component (−1: the
    prefix). `joint` (the paper format's joint parse unit, `downstream.mc_joint`) is not read:
    raw text is the prompt's text as written; parse units concern a tree model's input only."""
    del joint
    if not components or any(not c.strip() for c in components):
      raise ValueError(f"prompt components {list(components)!r}: every component must hold text")
    ends_C = np.cumsum([len(c) for c in components])
    encoding = self.tokenizer.tokenizer.encode("".join(components), add_special_tokens=False)
    ids_T = np.asarray(encoding.ids, np.int64)
    offsets_T2 = np.asarray(encoding.offsets, np.int64).reshape(-1, 2)
    component_T = token_regions(offsets_T2, ends_C)
    starts_C = np.r_[0, ends_C[:-1]]
    self.stats["straddling_tokens"] += int((offsets_T2[:, 0] < starts_C[component_T]).sum())
    empty_context = len(components) == 1
    if self.add_bos or empty_context:
      prefix = self.tokenizer.bos_id if self.add_bos else self.prefix_id
      ids_T, component_T = np.r_[prefix, ids_T], np.r_[-1, component_T]
    kinds_T = np.where(component_T < 0, Kind.BOS, Kind.TERMINAL).astype(np.int8)
    sequence = Sequence(ids_T, kinds_T, np.zeros(len(ids_T), np.int32),
                        np.arange(len(ids_T), dtype=np.int32))
    return Encoded(sequence, component_T.astype(np.int32))
