"""GTCA on the real sets (SPEC §10): splits for training, encoding through the parse cache, the
tree sources an ablation may use, and CoLA's Matthews correlation.

- **Splits** (`load_real`): train = the labeled rows of the set's training split after the
  first `dev_items` (held out as dev), at most `train_items`; test = the first `test_items`
  labeled rows of the evaluation split (`mcqa_data.SETS`; ≤ 0: all). A set's `also` sets
  (`blimp_mcqa`: its held-out paradigms as MCQA and as minimal pairs) are read too, for the
  end of the run: an MCQA one's first `test_items`, a pairs one `test_items` pairs in all
  (⌈test_items / paradigms⌉ per paradigm). Unlabeled rows are never
  used and are counted per split (`RealData.counts`, printed and stored in result.json).
- **Encoding** (`encode_cached`): the prompt is built with the parse cache's own prompt format
  (`PromptFormat.from_meta`: the same left truncation, chat template and BOS as the builder),
  its span tree read from the cache — a miss is a `CacheMissError` naming the example, never a
  run without structure. Prompts cut from the left are counted (`truncated`).
- **Tree sources**: the cache holds the trees of the parser it was built with (`parser` in its
  meta). `gold` takes them as they are; `right_branching` and `random` need a cache built with
  `--parser=right_branching` / `--parser=random`, `weak` one built with `--parser=FOLDER` of a
  weaker trained parser than the shipped one (`check_tree_source` refuses another);
  `permuted` shuffles the cached tree's leaves per example (`ablations.permute_leaves`).
- **CoLA**, `cola="prompt"` (the default, the paper's; `cola_judgments`): each sentence in the
  judgment prompt (`prompts.judgment_prompt`: the CoLA system prompt, `Answer:`), predicted
  acceptable iff log p(1) > log p(0) of the next token (`backbone.digit_ids`: " 1" / " 0" when
  single tokens, else "1" / "0", as the reference reads them; a tie is 0, as there); MCC ×100
  and accuracy. `cola="threshold"` (`cola_mcc`): each sentence scored alone (never in a chat
  template) by its mean per-token log-likelihood; predicted acceptable iff above the threshold
  that maximizes MCC on the fitting split (CoLA's train rows); MCC of the evaluation split.
- **BLiMP** (`blimp_metrics`): both sentences of every pair scored by summed log-likelihood of
  the tokens after the first (a cache built with `--bos` scores every word), the branch active at
  the run's evaluation α with m ≡ 1 (a sentence prompt masks nothing), span trees from the cache;
  identical token rows are scored once. A pair is right iff good > bad with both finite —
  `slm_jax.eval.blimp.pair_verdicts`, so a tie is wrong exactly as in the non-GTCA BLiMP — and the
  accuracies are that module's `summarize`: per paradigm, per field (`blimp_real_<field>`, the
  field as BLiMP writes it) and overall (`blimp_real`) as the **mean over paradigms** of
  per-paradigm accuracy (macro; the mean over pairs when every paradigm has as many pairs, as
  BLiMP's 67 × 1,000 and any `--limit` below 1,000 do), ×100. `blimp_real`, not `blimp`: `blimp`
  is the toy task's BLiMP-style pairs (`slm_jax.gtca.runs`).
"""

from __future__ import annotations

import collections
import dataclasses
import pathlib
from typing import Sequence

import numpy as np

from slm_jax.eval.blimp import pair_verdicts, summarize
from slm_jax.gtca import ablations, scoring
from slm_jax.gtca.backbone import Backbone, digit_ids
from slm_jax.gtca.batches import EncodedExample, row_width
from slm_jax.gtca.metrics import REAL_BLIMP, matthews_corrcoef, mcqa_metrics, option_drift
from slm_jax.gtca.cache_builder import parser_identity
from slm_jax.gtca.parse_cache import GIVEN, ParseCache, StaleCacheError
from slm_jax.gtca.mcqa_data import MCQA, PAIRS, SENTENCE, GtcaSplit, load_set, set_of
from slm_jax.gtca.prompts import PromptFormat, TextTokenizer

# tree source -> the cache's parser; `weak`: any trained parser folder but the shipped one
WEAK_PARSERS = {"right_branching": "right_branching", "random": "random"}
MODEL_FREE = ("right_branching", "random", GIVEN)
COLA_MODES = ("prompt", "threshold")


@dataclasses.dataclass
class RealData:
  """The labeled examples of train / dev / test and what was counted reading them."""
  name: str
  splits: dict[str, list]
  counts: dict[str, dict]
  also: dict[str, GtcaSplit] = dataclasses.field(default_factory=dict)  # `GtcaSet.also` sets

  def summary(self) -> str:
    return "\n".join(
        f"{self.name} {split}: {len(self.splits[split])} examples used ("
        + ", ".join(f"{k} {v}" for k, v in counts.items()) + ")" if split in self.splits
        else self.also[split].summary() + " (evaluated at the end)"
        for split, counts in self.counts.items())


def _limit(n: int) -> int | None:
  return n if n > 0 else None


def load_real(name: str, root: str | pathlib.Path, train_items: int, dev_items: int,
              test_items: int, seed: int = 0) -> RealData:
  """The three splits of an MCQA set (module docstring)."""
  spec = set_of(name)
  if spec.kind != MCQA:
    raise ValueError(f"{name} is not a multiple-choice set: it is evaluated, not trained on "
                     f"(python -m slm_jax.gtca.evaluate --run=DIR --task={name})")
  wanted = None if train_items <= 0 else train_items + max(dev_items, 0)
  train_split = load_set(name, root, spec.train_split, limit=wanted, seed=seed)
  labeled = train_split.labeled()
  dev, train = labeled[:max(dev_items, 0)], labeled[max(dev_items, 0):]
  test_split = load_set(name, root, spec.eval_split, limit=_limit(test_items), seed=seed)
  counts = {
      "train": {"split": spec.train_split, **train_split.counts, "used": len(train)},
      "dev": {"split": f"first {len(dev)} labeled of {spec.train_split}", "used": len(dev)},
      "test": {"split": spec.eval_split, **test_split.counts,
               "used": len(test_split.labeled())}}
  if not train or not test_split.labeled():
    raise ValueError(f"{name} under {root}: {len(train)} labeled training and "
                     f"{len(test_split.labeled())} labeled test examples; both are needed")
  also = {}
  for other in spec.also:  # evaluated at the end of a run (`mcqa_data.GtcaSet.also`)
    also[other] = load_set(other, root, set_of(other).eval_split, limit=_limit(test_items))
    if set_of(other).kind == PAIRS and test_items > 0:  # test_items pairs in all
      per = -(-test_items // max(1, len(also[other].paradigms)))
      also[other] = load_set(other, root, set_of(other).eval_split, limit=per)
    counts[other] = {"split": also[other].split, **also[other].counts}
  return RealData(name, {"train": train, "dev": dev, "test": test_split.labeled()}, counts, also)


def open_cache(path: str | pathlib.Path, tokenizer: TextTokenizer,
               n_options: int | None = None) -> tuple[ParseCache, PromptFormat]:
  """The cache (refused when built with another tokenizer) and the prompt format it stores."""
  try:
    cache = ParseCache(path, {"tokenizer": tokenizer.identity})
  except StaleCacheError as error:
    hint = ("" if n_options is None else f" (a cache for a slm_jax workdir backbone is built "
            f"with its prompt tokenizer: python -m slm_jax.gtca.cache --workdir=… "
            f"--options={n_options}, the run's option letters)")
    raise StaleCacheError(f"{error}{hint}") from None
  return cache, PromptFormat.from_meta(cache.meta)


def context_warning(fmt: PromptFormat, context: int | None, path) -> str | None:
  """A warning line when the cache's row limit is above the backbone's context (a cache built
  with `--max_len=0` or a larger value, or for another backbone): such rows are scored as they
  are, past the positions the backbone was trained for, and counted as `over_context`."""
  if context is None or (fmt.max_len is not None and fmt.max_len <= context):
    return None
  limit = "no row limit" if fmt.max_len is None else f"max_len {fmt.max_len}"
  return (f"warning: {path} was built with {limit}, above the backbone's context of {context} "
          f"tokens: longer rows are used as they are (counted as over_context); rebuild it "
          f"without --max_len to cut them from the left to the context")


def check_tree_source(cache: ParseCache, tree_source: str) -> None:
  """`right_branching` / `random` need a cache of that parser, `weak` one of a trained parser
  folder other than the shipped one; `gold` / `permuted` take any cache."""
  if tree_source not in (*WEAK_PARSERS, "weak"):
    return
  built = cache.meta.get("parser", "")
  if tree_source == "weak":
    from slm_jax.parser.api import SHIPPED  # pylint: disable=import-outside-toplevel
    if not built or built in MODEL_FREE or built == parser_identity(SHIPPED):
      raise ValueError(f"tree source 'weak' needs a cache built with --parser=FOLDER of a "
                       f"weaker trained parser; {cache.path} holds {built!r} trees")
    return
  if built != WEAK_PARSERS[tree_source]:
    raise ValueError(f"tree source {tree_source!r} needs a cache built with "
                     f"--parser={WEAK_PARSERS[tree_source]}; {cache.path} holds {built!r} trees")


def encode_cached(examples: Sequence, backbone: Backbone, cache: ParseCache, fmt: PromptFormat,
                  tree_source: str = "gold", seed: int = 0,
                  counts: collections.Counter | None = None) -> list[EncodedExample]:
  """Prompt + answer-letter rows of labeled MCQA examples with their cached span trees."""
  check_tree_source(cache, tree_source)
  counts = collections.Counter() if counts is None else counts
  out = []
  for index, example in enumerate(examples):
    if len(example.options) > len(backbone.letter_ids):
      raise ValueError(f"example {example.source}: {len(example.options)} options, the backbone "
                       f"was prepared with {len(backbone.letter_ids)} option letters")
    prompt = fmt.prompt(example.record(), backbone.text_tokenizer, example.source)
    counts["truncated"] += prompt.truncated > 0
    tree = cache.get(prompt.ids_T, example.source)
    if tree_source == "permuted":
      tree = ablations.permute_leaves(tree, np.random.default_rng([seed, index]))
    ids = np.concatenate([prompt.ids_T, [backbone.letter_ids[example.answer]]])
    counts["over_context"] += backbone.context is not None and len(ids) > backbone.context
    out.append(EncodedExample(ids, tree, backbone.letter_ids[:len(example.options)],
                                example.answer, example.group, example.source))
  counts["encoded"] += len(out)
  return out


def sentence_rows(examples: Sequence, tokenizer: TextTokenizer, cache: ParseCache,
                  fmt: PromptFormat, counts: collections.Counter | None = None,
                  context: int | None = None) -> list[tuple]:
  """(ids_T, span tree) of sentence examples (CoLA, BLiMP), trees from the cache; rows longer
  than `context` are counted (`over_context`)."""
  counts = collections.Counter() if counts is None else counts
  rows = []
  for example in examples:
    prompt = fmt.prompt(example.record(), tokenizer, example.source)
    counts["truncated"] += prompt.truncated > 0
    counts["over_context"] += context is not None and len(prompt.ids_T) > context
    rows.append((prompt.ids_T.astype(np.int32), cache.get(prompt.ids_T, example.source)))
  return rows


def best_threshold(scores_N: np.ndarray, labels_N: np.ndarray) -> float:
  """The threshold τ (midway between neighbouring scores) maximizing MCC of `score > τ`."""
  values = np.unique(np.asarray(scores_N, np.float64))
  if values.size < 2:
    return float(values[0]) if values.size else 0.0
  candidates = np.concatenate([[values[0] - 1.0], (values[1:] + values[:-1]) / 2])
  mccs = [matthews_corrcoef(labels_N, scores_N > t) for t in candidates]
  return float(candidates[int(np.argmax(mccs))])


def mean_token_scores(scorer, params, rows: Sequence[tuple], alpha: float, *, n_layers: int,
                      k: int) -> np.ndarray:
  """Mean per-token log-likelihood of each sentence row (its tokens after the first)."""
  sums = scoring.sentence_scores(scorer, params, rows, alpha, n_layers=n_layers, k=k)
  tokens = np.asarray([max(len(ids) - 1, 1) for ids, _ in rows], np.float64)
  return sums / tokens


def cola_mcc(scorer, params, fit_rows: Sequence[tuple], fit_labels: Sequence[int],
             eval_rows: Sequence[tuple], eval_labels: Sequence[int], alpha: float, *,
             n_layers: int, k: int) -> dict[str, float]:
  """{"cola": MCC ×100 on the evaluation rows, "cola_threshold": τ fitted on the fit rows}."""
  fit = mean_token_scores(scorer, params, fit_rows, alpha, n_layers=n_layers, k=k)
  threshold = best_threshold(fit, np.asarray(fit_labels))
  scores = mean_token_scores(scorer, params, eval_rows, alpha, n_layers=n_layers, k=k)
  mcc = matthews_corrcoef(np.asarray(eval_labels), scores > threshold)
  return {"cola": 100.0 * mcc, "cola_threshold": threshold}


def cola_judgments(scorer, params, examples: Sequence, backbone: Backbone, cache: ParseCache,
                   fmt: PromptFormat, alpha: float, *, n_layers: int, k: int,
                   counts: collections.Counter | None = None) -> dict[str, float]:
  """CoLA by the prompted 0/1 judgment (module docstring): {"cola": MCC ×100,
  "cola_accuracy": %} of labeled sentence examples, trees of their judgment prompts from the
  cache (`cache_records.task_records` writes them)."""
  counts = collections.Counter() if counts is None else counts
  (zero, one), form = digit_ids(backbone.text_tokenizer, backbone.source)
  counts["cola_digit_form"] = form  # type: ignore[assignment]
  encoded = []
  for example in examples:
    prompt = fmt.prompt(example.judged_record(), backbone.text_tokenizer, example.source)
    counts["truncated"] += prompt.truncated > 0
    ids = np.concatenate([prompt.ids_T, [one if example.label else zero]])
    counts["over_context"] += backbone.context is not None and len(ids) > backbone.context
    encoded.append(EncodedExample(ids, cache.get(prompt.ids_T, example.source), (zero, one),
                           example.label, "", example.source))
  scores_N2 = scoring.letter_scores(scorer, params, encoded, alpha, n_layers=n_layers, k=k,
                                    width=row_width(encoded))
  predicted_N = scores_N2[:, 1] > scores_N2[:, 0]  # a tie is 0, as the reference reads it
  labels_N = np.asarray([e.answer for e in encoded])
  return {"cola": 100.0 * matthews_corrcoef(labels_N, predicted_N),
          "cola_accuracy": 100.0 * float(np.mean(predicted_N == labels_N.astype(bool)))}


def blimp_metrics(scorer, params, split: GtcaSplit, tokenizer: TextTokenizer, cache: ParseCache,
                  fmt: PromptFormat, alpha: float, *, n_layers: int, k: int,
                  counts: collections.Counter | None = None,
                  context: int | None = None) -> tuple[dict, dict, dict]:
  """BLiMP's accuracies of one run (module docstring): metrics {`blimp_real`,
  `blimp_real_<field>`}, counts {pairs, sentences, unique sentences, ties, non-finite pairs},
  breakdown {terms, paradigms: accuracy (%), field, term, pairs}."""
  rows = pair_rows(split, tokenizer, cache, fmt, counts, context)
  return pair_metrics(scorer, params, split, rows, alpha, n_layers=n_layers, k=k)


def pair_rows(split: GtcaSplit, tokenizer: TextTokenizer, cache: ParseCache, fmt: PromptFormat,
              counts: collections.Counter | None = None, context: int | None = None
              ) -> list[tuple]:
  """The sentence rows of BLiMP pairs: good, bad, good, … (`sentence_rows`)."""
  sentences = [s for pair in split.examples for s in pair.sentences()]
  return sentence_rows(sentences, tokenizer, cache, fmt, counts, context)


def pair_metrics(scorer, params, split: GtcaSplit, rows: Sequence[tuple], alpha: float, *,
                 n_layers: int, k: int) -> tuple[dict, dict, dict]:
  """`blimp_metrics` of rows already read from the cache (`pair_rows`)."""
  unique: dict[bytes, int] = {}  # token ids -> index of the first row with them
  where_N = np.asarray([unique.setdefault(ids.tobytes(), n) for n, (ids, _) in enumerate(rows)],
                       np.int64)
  first, where_N = np.unique(where_N, return_inverse=True)
  scores = scoring.sentence_scores(scorer, params, [rows[i] for i in first], alpha,
                                    n_layers=n_layers, k=k)
  scores_P2 = scores[where_N].reshape(-1, 2)
  correct, ties, nonfinite = pair_verdicts(scores_P2[:, 0], scores_P2[:, 1])
  which = np.asarray([pair.paradigm for pair in split.examples], np.int64)
  result = summarize(split.paradigms, correct, which)
  metrics = {REAL_BLIMP: result.overall,
             **{f"{REAL_BLIMP}_{f}": v for f, v in result.fields.items()}}
  counted = {"pairs": len(correct), "sentences": len(rows), "unique_sentences": len(first),
             "ties": ties, "nonfinite_pairs": nonfinite}
  return metrics, counted, {"terms": result.terms, "paradigms": result.paradigms}


def is_sentence_set(name: str) -> bool:
  return set_of(name).kind == SENTENCE


def score_run(restored, name: str, root: str | pathlib.Path, cache_path: str | pathlib.Path,
              *, limit: int = 0, fit_limit: int = 0, cola: str = "prompt", log=print) -> dict:
  """The metrics of a restored run (`slm_jax.gtca.runs.restore_run`) on one real set's
  evaluation split: MCQA accuracy (`name`, `name_<group>`) and, for branch methods, the option
  drift; CoLA's MCC (`cola`: "prompt", the 0/1 judgment, or "threshold", fitted on `fit_limit`
  train rows); BLiMP's accuracies
  (`blimp_metrics`; `limit`: pairs per paradigm). Returns {"metrics", "counts"} and for BLiMP
  "breakdown" (per-term and per-paradigm accuracies)."""
  settings, backbone, graphdef, params, alpha = (
      restored.settings, restored.backbone, restored.graphdef, restored.params, restored.alpha)
  n_layers, k = backbone.decoder.config.n_layers, settings.k
  spec = set_of(name)
  if cola not in COLA_MODES:
    raise ValueError(f"cola={cola!r} is not one of {', '.join(COLA_MODES)}")
  cache, fmt = open_cache(cache_path, backbone.text_tokenizer, settings.n_options)
  counts: dict = {}
  extra: dict = {}
  warning = context_warning(fmt, backbone.context, cache_path)
  if warning:
    log(warning)
  with cache:
    evaluated = load_set(name, root, spec.eval_split, limit=_limit(limit))
    counts["eval"] = {"split": evaluated.split, **evaluated.counts}
    log(evaluated.summary())
    tally: collections.Counter = collections.Counter()
    if spec.kind == PAIRS:
      metrics, counts["pairs"], extra["breakdown"] = blimp_metrics(
          scoring.make_sequence_scorer(graphdef), params, evaluated, backbone.text_tokenizer,
          cache, fmt, alpha, n_layers=n_layers, k=k, counts=tally, context=backbone.context)
    elif spec.kind == SENTENCE and cola == "prompt":
      metrics = cola_judgments(scoring.make_letter_scorer(graphdef), params,
                               evaluated.labeled(), backbone, cache, fmt, alpha,
                               n_layers=n_layers, k=k, counts=tally)
      counts["cola_digit_form"] = tally["cola_digit_form"]
    elif spec.kind == SENTENCE:
      fitted = load_set(name, root, spec.train_split, limit=_limit(fit_limit))
      counts["fit"] = {"split": fitted.split, **fitted.counts}
      log(fitted.summary() + " — fits the acceptability threshold")
      fit_rows = sentence_rows(fitted.labeled(), backbone.text_tokenizer, cache, fmt, tally,
                               backbone.context)
      eval_rows = sentence_rows(evaluated.labeled(), backbone.text_tokenizer, cache, fmt, tally,
                                backbone.context)
      scorer = scoring.make_sequence_scorer(graphdef)
      metrics = cola_mcc(scorer, params, fit_rows, [x.label for x in fitted.labeled()],
                         eval_rows, [x.label for x in evaluated.labeled()], alpha,
                         n_layers=n_layers, k=k)
    else:
      encoded = encode_cached(evaluated.labeled(), backbone, cache, fmt, counts=tally)
      scorer = scoring.make_letter_scorer(graphdef)
      width = row_width(encoded)
      scores = scoring.letter_scores(scorer, params, encoded, alpha, n_layers=n_layers, k=k,
                                      width=width)
      metrics = mcqa_metrics(scores, encoded, name)
      if alpha > 0:
        off = scoring.letter_scores(scorer, params, encoded, 0.0, n_layers=n_layers, k=k,
                                     width=width)
        metrics[f"{name}_drift"] = option_drift(scores, off)
    counts["truncated"] = tally["truncated"]
    counts["over_context"] = tally["over_context"]
  return {"metrics": metrics, "counts": counts, **extra}
