"""The toy task's rows (SPEC §10, docs/GTCA_TOY.md): MCQA prompts and BLiMP-style sentence pairs.

- `encode_items`: each toy item as a prompt (the backbone's prompt format: BOS, its chat template
  when it has one) + answer-letter row (`batches.EncodedExample`) with the span tree of its question under
  a tree source (`ablations.question_tree`: gold, weak, random, permuted); a row is cut from the
  left to the backbone's context, letter included, and counted.
- `encode_pairs`: the test items as minimal pairs — the sentence with the agreeing verb vs the
  other form, each a sentence prompt (BOS + words, m ≡ 1) with its tree under the same source.
The random and permuted sources draw from seeds of (run seed, split stream, item index), so the
rows are a function of the run's settings.
"""

from __future__ import annotations

import collections
from typing import Sequence

import numpy as np

from slm_jax.gtca import ablations
from slm_jax.gtca.backbone import Backbone
from slm_jax.gtca.batches import EncodedExample
from slm_jax.gtca.prompts import PromptFormat, sentence_prompt
from slm_jax.gtca.spans import span_tree
from slm_jax.gtca.toy_task import ToyItem, filled


def encode_items(items: Sequence[ToyItem], backbone: Backbone, tree_source: str,
                 seed: int, counts: collections.Counter | None = None,
                 weak_parser: str = "") -> list[EncodedExample]:
  """Prompt + answer-letter rows and span trees of toy items under `tree_source`; the random
  and permuted sources draw from `SeedSequence([seed, split stream, item index])`. A row is cut
  from the left to the backbone's context, letter included (`counts["truncated"]` counts them)."""
  counts = collections.Counter() if counts is None else counts
  fmt = PromptFormat(max_len=backbone.context, bos=True,
                     chat=backbone.text_tokenizer.chat_template is not None)
  streams = {"train": 0, "dev": 1, "test": 2}
  weak = (ablations.weak_trees([item.tree.leaves() for item in items], weak_parser)
          if tree_source == "weak" else [None] * len(items))
  out = []
  for item, weak_tree in zip(items, weak):
    example_id = f"{item.split}:{item.index}"
    rng = np.random.default_rng(np.random.SeedSequence(
        [seed, streams.get(item.split, 3), item.index]))
    prompt = fmt.prompt({"question": item.question, "options": list(item.options)},
                        backbone.text_tokenizer, example_id)
    counts["truncated"] += prompt.truncated > 0
    tree = span_tree(prompt, [ablations.question_tree(item.tree, tree_source, rng, weak_tree)])
    if tree_source == "permuted":
      tree = ablations.permute_leaves(tree, rng)
    ids = np.concatenate([prompt.ids_T, [backbone.letter_ids[item.answer]]])
    out.append(EncodedExample(ids, tree, backbone.letter_ids[:len(item.options)], item.answer,
                       item.attractor, example_id))
  return out


def encode_pairs(items: Sequence[ToyItem], backbone: Backbone, tree_source: str,
                 seed: int, weak_parser: str = "") -> list[tuple[tuple, tuple]]:
  """BLiMP-style minimal pairs of toy items: ((good ids, span tree), (bad ids, span tree)) —
  the sentence with the agreeing verb vs the other form, each a sentence prompt (BOS + words,
  m ≡ 1) with its tree under `tree_source` (drawn like `encode_items`, stream + 10)."""
  filled_items = [[filled(item, option) for option in (item.answer, 1 - item.answer)]
                  for item in items]
  weak = (iter(ablations.weak_trees([words for pair in filled_items for words, _ in pair],
                                    weak_parser)) if tree_source == "weak" else None)
  out = []
  for item, both in zip(items, filled_items):
    pair = []
    for option, (words, tree) in zip((item.answer, 1 - item.answer), both):
      rng = np.random.default_rng(np.random.SeedSequence([seed, 10 + item.index, option]))
      prompt = sentence_prompt(" ".join(words), backbone.text_tokenizer,
                               example_id=f"{item.split}:{item.index}:{option}",
                               max_len=backbone.context, bos_id=backbone.text_tokenizer.bos_id)
      span = span_tree(prompt, [ablations.question_tree(tree, tree_source, rng,
                                                        next(weak) if weak else None)])
      if tree_source == "permuted":
        span = ablations.permute_leaves(span, rng)
      pair.append((prompt.ids_T.astype(np.int32), span))
    out.append(tuple(pair))
  return out
