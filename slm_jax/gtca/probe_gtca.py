"""The UUAS probe's GTCA switch (`python -m slm_jax.gtca.probe --gtca=RUN --cache=FILE`): the
same probe on the frozen backbone and on a GTCA-trained run, both curves in one figure.

- **GTCA**: the run restored as `python -m slm_jax.gtca.train` left it
  (`runs.restore_run`: the backbone from its workdir, LoRA + the branch from the last stage's
  checkpoint), the branch active at the run's evaluation α. Each probed sentence's span tree is
  read from the parse cache under the sha256 of the exact ids the probe feeds (BOS + the word
  ids), all before anything is probed; a miss is an error naming the sentence
  (`CacheMissError`), never a run without the branch. The branch runs inside the jitted
  forward (`structural_probe.word_vectors(branch=…)`). `python -m slm_jax.gtca.cache --ptb=FILES
  --workdir=BACKBONE --options=N --bos` (N: the run's option letters) builds that cache (each
  tree's own words and brackets, read with the probe's normalization).
- **Backbone**: the frozen backbone as its workdir loads it (no adapters, no branch).
- Both read each sentence as the cache builder encoded it (`sentence_encoder`: the words joined by
  one space, tokenized whole by the run's text tokenizer, BOS once — one id per word for a
  word-level backbone, the text's own pieces for a subword one), so the two curves see the same
  inputs and every cached tree lines up with them. Writes OUT/backbone/uuas.json,
  OUT/gtca/uuas.json (each with its own one-curve plot) and OUT/uuas.png with both curves; the
  trained curve is labelled with the run's method (`GTCA`, `LoRA-only` — a LoRA-only run probes
  its adapters at α = 0, …).

"""

from __future__ import annotations

import pathlib
from typing import Callable, Sequence

import numpy as np

from slm_jax.gtca import structural_probe
from slm_jax.gtca.backbone import frozen_model
from slm_jax.gtca.batches import padded_chunks
from slm_jax.gtca.parse_cache import ParseCache
from slm_jax.gtca.probe_trees import ProbeSentence
from slm_jax.gtca.prompts import TextTokenizer, sentence_prompt
from slm_jax.gtca.report import DISPLAY
from slm_jax.gtca.runs import restore_run
from slm_jax.gtca.spans import SpanTree

PLOT_LABELS = ("backbone", "GTCA")


def sentence_encoder(tokenizer: TextTokenizer) -> structural_probe.SentenceEncoder:
  """A probed sentence as `gtca.cache --ptb … --bos` encoded it: its words joined by one space,
  tokenized whole by the backbone's text tokenizer (`prompts.sentence_prompt`, BOS once), each
  token given the word holding its last character (−1: BOS). For a word-level backbone these
  are the word ids; for a subword backbone (Hugging Face, GGUF) the pieces of the text as
  written, which encoding word by word would not give (BPE marks a word's leading space)."""

  def encode_sentence(s: ProbeSentence) -> tuple[np.ndarray, np.ndarray]:
    prompt = sentence_prompt(" ".join(s.words), tokenizer, bos_id=tokenizer.bos_id)
    lengths_W = np.array([len(w) for w in s.words], np.int64)
    ends_W = np.cumsum(lengths_W + 1) - 1  # one space after each word but the last
    word_T = np.searchsorted(ends_W, prompt.offsets_T2[:, 1] - 1, side="right")
    if tokenizer.bos_id is not None:
      word_T[0] = -1
    return prompt.ids_T.astype(np.int32), word_T.astype(np.int32)

  return encode_sentence


def cached_trees(cache: ParseCache, sentences: Sequence[ProbeSentence],
                 encode_sentence: structural_probe.SentenceEncoder
                 ) -> dict[tuple[str, ...], SpanTree]:
  """words → span tree of every sentence, read before anything is probed (a miss stops the
  probe at once, naming the sentence)."""
  out = {}
  for s in sentences:
    if s.words not in out:
      ids, _ = encode_sentence(s)
      out[s.words] = cache.get(ids, example=f"probe sentence {' '.join(s.words)[:60]!r}")
  return out


def cached_branch(gtca, trees: dict, n_layers: int, alpha: float, k: int) -> tuple:
  """`branch=(arrays_for, build)` for `structural_probe.word_vectors`: per batch the rows' chunk
  layout (their cached span trees) and the branch's parameters go into the jitted forward, where
  the chunk memories are made from the frozen embeddings and the branch's hook is built."""
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from flax import nnx  # pylint: disable=import-outside-toplevel
  graphdef, state = nnx.split(gtca)

  def arrays_for(batch: structural_probe.ProbeBatch):
    rows, width = batch.tokens_BT.shape
    chunks = padded_chunks([trees[s.words] for s in batch.sentences], rows, n_layers, width, k)
    return {"chunks": type(chunks)(*(jnp.asarray(x) for x in chunks)), "gtca": state}

  def build(x_BTD, arrays):
    branch = nnx.merge(graphdef, arrays["gtca"])
    return branch.side(branch.memories(x_BTD, arrays["chunks"]), alpha)

  return arrays_for, build


def probe_backbone_and_gtca(run_dir: str | pathlib.Path, cache_path: str | pathlib.Path,
                            train: Sequence[ProbeSentence], test: Sequence[ProbeSentence],
                            out: str | pathlib.Path, *, log: Callable[[str], None] = print,
                            **options) -> dict[str, dict]:
  """Both probes (module docstring); `options` go to `structural_probe.probe_model` (rank,
  steps, …)."""
  restored = restore_run(run_dir, log)
  settings, backbone, alpha = restored.settings, restored.backbone, restored.alpha
  tokenizer = backbone.text_tokenizer
  bos_id = tokenizer.bos_id
  encode_sentence = sentence_encoder(tokenizer)
  with ParseCache(cache_path, {"tokenizer": tokenizer.identity}) as cache:
    trees = cached_trees(cache, [*train, *test], encode_sentence)
  log(f"{len(trees)} span trees of the probed sentences read from {cache_path}")
  out = pathlib.Path(out)
  frozen = frozen_model(settings.backbone)
  results = {"backbone": structural_probe.probe_model(
      frozen, None, bos_id, train, test, out / "backbone", label=PLOT_LABELS[0], log=log,
      extra={"model": settings.backbone}, encode_sentence=encode_sentence, **options)}
  branch = cached_branch(restored.model.gtca, trees, backbone.decoder.config.n_layers, alpha,
                         settings.k)
  # the trained curve is named after the run's method (a LoRA-only run probes at α = 0)
  label = DISPLAY.get(settings.name, settings.name)
  results["gtca"] = structural_probe.probe_model(
      backbone.decoder, None, bos_id, train, test, out / "gtca", label=label,
      branch=branch, log=log, extra={"model": str(run_dir), "method": settings.name,
                                     "alpha": alpha, "cache": str(cache_path)},
      encode_sentence=encode_sentence, **options)
  structural_probe.plot([(PLOT_LABELS[0], results["backbone"]), (label, results["gtca"])],
                        out / structural_probe.PLOT_FILE)
  gains = np.asarray(results["gtca"]["uuas"]) - np.asarray(results["backbone"]["uuas"])
  log(f"UUAS {label} − backbone per layer: {' '.join(f'{g:+.3f}' for g in gains)}; wrote "
      f"{out / structural_probe.PLOT_FILE} (both curves)")
  return results
