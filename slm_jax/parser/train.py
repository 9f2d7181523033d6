"""Training the chart parser: `python -m slm_jax.parser.train --workdir=DIR [--config=FILE|NAME]
[--config.KEY=VALUE] [--train=FILES --dev=FILES --test=FILES | --split=gum] [--export=DIR]
[--max_minutes=M]`.

Settings (`slm_jax.parser.config.ParserTrainConfig`) come from the one config loader
(`slm_jax.config_files`): `--config=FILE|NAME` (a file whose get_config() returns some keys, or a
packaged config: tiny, default (the default), gpu), then the flags `--encoder` (= `model.encoder`),
`--max_minutes`, `--max_epochs`, `--eval_every`, `--seed`, `--members`, then `--config.KEY=VALUE`
(every key, e.g. `--config.model.hidden=300`).

Data: PTB files or folders (comma-separated), SPEC §1 normalized; with no `--train`/`--dev`, GUM's
official split (`../shared/data/gum/splits.md`: train / dev / test). Training sentences longer than
`max_train_words` are skipped and counted. The vocabularies (words, characters, labels with the
training data's unary chains) are built from the training trees and saved in the workdir.

Loop: batches of `batch_words` padded words, one shape per length bucket (seeded shuffles per epoch),
global-norm clipping and AdamW (`parser_optimizer`: optax, its learning rate an
`optax.inject_hyperparams` value set before each step by `learning_rate`: warmup, then the config's
`schedule`: halved when dev F1 stalls, or a cosine over `max_epochs`), CRF NLL of the
right-binarized gold tree per word, plus (with `tag_weight` > 0) a POS-tagging loss on the encoder
from the training trees' preterminals (a training-only head; the exported parser has no tagger and
reads words only) — the model's own `TrainedParser.loss_sums`. The run is built by the one
`train.state.initial_state` (the shared compiled step; dropout keyed by (seed, step)) and runs in
`train.state.Trainer` (the one loop, `slm_jax.train.loop.Loop`: the loss checked at every step,
nothing saved after a non-finite one). A progress line every `log_every` steps and at each epoch end (step, epoch,
losses, lr, words/s, ETA). Dev labelled F1 (evalb, `slm_jax.parser.evalb`) once per epoch (or
every `eval_every` steps of an epoch and at its end); the best model is exported (safetensors,
`weights.save_parser`) to `WORKDIR/best` and, at the end, to `--export`. Checkpoints
(`train.checkpointing.Checkpointer`: params, optimizer state and the JSON meta — step, epoch,
position, lr scale, best F1, history) at each epoch end, after each evaluation, every
`checkpoint_every_s` and at a stop; a killed run resumes where the last checkpoint left it. Early
stopping after `patience` evaluations without a better dev F1; `max_minutes` stops checkpointed
and resumable (exit 1). `WORKDIR/identity.json` records what makes the run (its config and its
training and dev data, `slm_jax.identity`): a command with another config or data is refused
naming the differing keys (`max_minutes`, `max_epochs`, `log_every`, `checkpoint_every_s` may
change); a second trainer of a workdir in use is refused (`slm_jax.locks`).
`WORKDIR/summary.json` holds the data counts, the history and the final scores;
`WORKDIR/train_log.txt` the progress lines.

Ensembles (`members` > 1, the default config's 3; `--members` overrides): member K is an ordinary
run in `WORKDIR/memberK` with seed `seed + K`, trained in turn on the data read once (a
`train.sweep`: every member's identity.json is checked first, and a member whose summary.json
says it finished is used as it is, so a killed ensemble run resumes at the member it was in); then
`ensemble.combine` averages their span scores into `WORKDIR/best`, the ∅ bias is tuned on dev,
dev and test are scored, and `--export` receives the ensemble with each member's log and summary.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
import shutil
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from slm_jax import cli, config_files, locks
from slm_jax.parser import config as parser_config
from slm_jax.parser import crf, ensemble, evalb
from slm_jax.parser.api import Parser, load_parser
from slm_jax.parser.config import ParserTrainConfig
from slm_jax.parser.corpus import resolve, resolve_tagged
from slm_jax.parser.labels import LabelVocab, binarize
from slm_jax.parser.model import PosTagger, SpanScorer, TrainedParser
from slm_jax.parser.vocab import Vocab, padded_length
from slm_jax.parser.weights import save_parser
from slm_jax import identity
from slm_jax.train import sharding
from slm_jax.train.loop import END, TIME, Action, Cadence, Hook, Persist, Window, rate_text
from slm_jax.train.state import Trainer, initial_state
from slm_jax.train.sweep import SweepItem, run_sweep


@dataclasses.dataclass
class Example:
  words: list[str]
  gold_P3: np.ndarray  # the 2n − 1 (i, j, label) rows of the right binarization
  tags_N: np.ndarray | None = None  # POS tag ids (1..G − 1) for the auxiliary head, if known


def tag_vocabulary(tags: list[list[str] | None]) -> list[str]:
  """Index 0 is "no tag" (masked out of the loss); the training data's tags after it, sorted."""
  return [""] + sorted({tag for sentence in tags if sentence for tag in sentence})


def make_batches(examples: list[Example], cfg: ParserTrainConfig, epoch: int
                 ) -> list[tuple[int, list[int]]]:
  """(padded length N, example indices) per batch of one epoch, seeded by (seed, epoch)."""
  rng = np.random.default_rng([cfg.seed, epoch])
  by_bucket: dict[int, list[int]] = {}
  for k, example in enumerate(examples):
    by_bucket.setdefault(padded_length(len(example.words), cfg.buckets), []).append(k)
  batches = []
  for N, indices in sorted(by_bucket.items()):
    indices = [indices[k] for k in rng.permutation(len(indices))]
    rows = rows_for(N, cfg)
    batches.extend((N, indices[k:k + rows]) for k in range(0, len(indices), rows))
  return [batches[k] for k in rng.permutation(len(batches))]


def encode_batch(examples: list[Example], N: int, indices: list[int], rows: int, vocab: Vocab,
                 cfg: ParserTrainConfig, keep_W: np.ndarray | None, rng: np.random.Generator
                 ) -> dict[str, jax.Array]:
  """Arrays of one padded batch (rows fixed per bucket so each bucket compiles once), as
  `TrainedParser.loss_sums` reads them."""
  chosen = [examples[k] for k in indices]
  sentences = [e.words for e in chosen] + [["."]] * (rows - len(chosen))
  word_ids_BT, char_ids_BTC, lengths_B = vocab.encode(sentences, N, cfg.model.max_word_chars)
  if keep_W is not None:  # word dropout: rare words become UNK (their characters stay)
    drop_BT = rng.random(word_ids_BT.shape) >= keep_W[word_ids_BT]
    word_ids_BT = np.where(drop_BT, 1, word_ids_BT).astype(np.int32)
  P = 2 * N - 1
  gold_BP3 = np.zeros((rows, P, 3), np.int32)
  valid_BP = np.zeros((rows, P), bool)
  tags_BN = np.zeros((rows, N), np.int32)  # 0 = no tag (padding, untagged sentences)
  for b, example in enumerate(chosen):
    gold_BP3[b, :len(example.gold_P3)] = example.gold_P3
    valid_BP[b, :len(example.gold_P3)] = True
    if example.tags_N is not None:
      tags_BN[b, :len(example.tags_N)] = example.tags_N
  real_B = np.arange(rows) < len(chosen)
  arrays = {"word_ids": word_ids_BT, "char_ids": char_ids_BTC, "lengths": lengths_B,
            "gold": gold_BP3, "valid": valid_BP, "real": real_B, "tags": tags_BN}
  return {name: jnp.asarray(array) for name, array in arrays.items()}


def rows_for(N: int, cfg: ParserTrainConfig) -> int:
  """Sentences per batch of padded length N: `batch_words` padded words."""
  return max(1, cfg.batch_words // N)


def parser_optimizer(cfg: ParserTrainConfig) -> optax.GradientTransformation:
  """Global-norm clipping, then AdamW whose learning rate is an optimizer-state value
  (`optax.inject_hyperparams`): `learning_rate` sets it before each step. The other
  hyperparameters stay Python constants (injected, β1 = 0.9 would be a float32 array and 1 − β1
  another number than the constant's)."""
  adamw = optax.inject_hyperparams(optax.adamw, static_args=ADAMW_CONSTANTS)
  return optax.chain(optax.clip_by_global_norm(cfg.clip_norm),
                     adamw(learning_rate=cfg.learning_rate, weight_decay=cfg.weight_decay))


ADAMW_CONSTANTS = ("b1", "b2", "eps", "eps_root", "weight_decay")


def parser_state(model: TrainedParser, cfg: ParserTrainConfig, total_steps: int):
  """(graphdef, rest, `TrainState`) of a parser run: the shared step on one device over the
  model's `loss_sums`, its RNG streams merged as they are, dropout keyed by (seed, step), its one
  micro-batch differentiated directly (`scan_one=False`)."""
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)
  seed_key = jax.random.key(cfg.seed)
  state = initial_state(graphdef, params, parser_optimizer(cfg), total_steps,
                        batch_rows=1, mesh=sharding.make_mesh(1, 1, jax.devices()[:1]),
                        flag="batch_words", shard=False, rest=rest,
                        dropout_key=lambda count, index: jax.random.fold_in(seed_key, count),
                        scan_one=False)
  return graphdef, rest, state


def learning_rate(cfg: ParserTrainConfig, meta: dict, steps_per_epoch: int) -> float:
  """The step's learning rate: linear warmup, then the plateau scale or the cosine."""
  warmup = min(1.0, (meta["step"] + 1) / cfg.warmup_steps)
  if cfg.schedule == "plateau":
    return cfg.learning_rate * meta["lr_scale"] * warmup
  total = max(cfg.max_epochs * steps_per_epoch - cfg.warmup_steps, 1)
  progress = min(max(meta["step"] - cfg.warmup_steps, 0) / total, 1.0)
  low = cfg.final_lr_fraction
  return cfg.learning_rate * warmup * (low + (1 - low) * 0.5 * (1 + math.cos(math.pi * progress)))


def evaluate(graphdef, params, rest, vocab, labels, trees) -> evalb.Score:
  model = nnx.merge(graphdef, params, rest).scorer
  parser = Parser(model, vocab, labels)
  return evalb.score_trees(trees, parser.parse([t.leaves() for t in trees]))


class Log:
  def __init__(self, path: pathlib.Path):
    self.path = path

  def __call__(self, line: str) -> None:
    print(line, flush=True)
    with self.path.open("a", encoding="utf-8") as f:
      f.write(line + "\n")


# The flags that set a config key: flag name -> key.
CONFIG = dataclasses.replace(parser_config.LOADER, aliases={
    "encoder": "model.encoder", "max_minutes": "max_minutes", "max_epochs": "max_epochs",
    "eval_every": "eval_every", "seed": "seed", "members": "members"})


@cli.options
class ParserTrainOptions:
  """The flags of `python -m slm_jax.parser.train` (the module docstring); the ones that set a
  config key (`CONFIG.aliases`) are given to the config loader as text (None: not given)."""

  workdir: str = cli.option()
  config: str = cli.option("default", help="FILE|NAME (see below); default default")
  train: str = cli.option("", help="PTB files/folders, comma-separated")
  dev: str = cli.option("")
  test: str = cli.option("", help="scored once at the end (GUM test by default when training "
                         "on the GUM split)")
  split: str = cli.option("gum", help="the default data: 'gum' (the official GUM "
                          "train/dev/test split)")
  gum: str | None = cli.option(None, help="GUM folder (default ../shared/data/gum)")
  encoder: str | None = cli.option(None, help="override the config: bilstm | transformer")
  max_minutes: str | None = cli.option(None, help="stop (resumable) after this wall time "
                                       "(default: the config's; 0 = no limit)")
  max_epochs: str | None = cli.option(None)
  eval_every: str | None = cli.option(None, help="steps between dev evaluations (default: the "
                                      "config's; 0 = once per epoch)")
  export: str | None = cli.option(None, help="folder for the final (best) model")
  seed: str | None = cli.option(None, help="override the config's seed (initialization, batch "
                                "order, dropout)")
  members: str | None = cli.option(None, help="override the config's ensemble size (1 = a "
                                   "single parser)")

  def validate(self) -> None:
    if self.split != "gum":
      raise cli.CliError(f"--split={self.split}: the only named split is 'gum'")


def main(argv=None) -> int:
  overrides, rest = config_files.split_overrides(sys.argv[1:] if argv is None else argv)
  options = cli.parse_options(ParserTrainOptions, rest, prog="python -m slm_jax.parser.train",
                              doc=__doc__.split("\n\n", 1)[0], epilog=CONFIG.describe())
  return train_parser(options, overrides)


def train_parser(options: ParserTrainOptions, overrides: list[str] = ()) -> int:
  """A parser run (or an ensemble's) in `options.workdir`: settings from `--config`, the flags,
  then `overrides`; the exit code."""
  cfg = CONFIG.load(options.config, overrides, CONFIG.flag_values(options))
  workdir = pathlib.Path(options.workdir)
  with locks.writer_lock(workdir, what="parser training"):  # one writer per workdir
    if cfg.members > 1:
      return train_ensemble(cfg, workdir, options)
    return train(cfg, workdir, options)


def scoring_sets(options: ParserTrainOptions) -> tuple[tuple, tuple]:
  """(trees, name, missing documents) of the dev set and of the test set: `--test`, or GUM test
  when training on the GUM split, or none (`[]`) when `--train` is given without `--test`."""
  test_spec = options.test or (None if options.train else "")
  test = resolve(test_spec, "test", options.gum) if test_spec is not None else ([], "", [])
  return resolve(options.dev, "dev", options.gum), test


@dataclasses.dataclass
class ParserData:
  """The data of a training run, read once (an ensemble's members share it)."""

  kept: list  # the training trees within max_train_words
  kept_tags: list  # their POS tags (None: untagged)
  dev_trees: list
  test_trees: list
  info: dict  # names and counts (summary.json's "data")


def load_data(cfg: ParserTrainConfig, options: ParserTrainOptions) -> ParserData:
  """The training trees (longer than `max_train_words`: skipped, counted), dev and test."""
  train_trees, train_tags, train_name, missing = resolve_tagged(options.train, "train",
                                                                      options.gum)
  (dev_trees, dev_name, dev_missing), (test_trees, test_name, _) = scoring_sets(options)
  fits = [len(t.leaves()) <= cfg.max_train_words for t in train_trees]
  kept = [t for t, ok in zip(train_trees, fits) if ok]
  kept_tags = [g for g, ok in zip(train_tags, fits) if ok]
  if not kept or not dev_trees:
    raise cli.CliError(f"no training ({len(kept)}) or dev ({len(dev_trees)}) sentences")
  info = {"train": train_name, "dev": dev_name, "test": test_name,
          "train_sentences": len(kept), "train_words": sum(len(t.leaves()) for t in kept),
          "skipped_long": len(fits) - len(kept), "missing_documents": missing + dev_missing,
          "untagged_sentences": sum(g is None for g in kept_tags), "dev_sentences": len(dev_trees),
          "test_sentences": len(test_trees)}
  return ParserData(kept, kept_tags, dev_trees, test_trees, info)


IDENTITY_FILE = "identity.json"
# What may change when a parser workdir is continued: cadence, the time budget, the epoch budget
# (a run that reached max_epochs continues with a larger one) and the ensemble size of the command.
RESUMABLE_KEYS = frozenset({"config.max_minutes", "config.max_epochs", "config.log_every",
                            "config.checkpoint_every_s", "config.members"})


def run_identity(cfg: ParserTrainConfig, data: ParserData) -> dict:
  """What makes a parser run (WORKDIR/identity.json): its config and its training and dev data
  (the test set is only scored: it may change)."""
  info = data.info
  return {"config": dataclasses.asdict(cfg),
          "data": {k: info[k] for k in ("train", "dev", "train_sentences", "train_words",
                                        "skipped_long", "dev_sentences")}}


def check_run(workdir: pathlib.Path, record: dict) -> None:
  """Refuses a workdir that holds another parser run (another config or data; reads only)."""
  checked = identity.check_record(
      workdir / IDENTITY_FILE, record, what=f"{workdir} holds another parser run",
      where="in the workdir", ignore=RESUMABLE_KEYS,
      hint="use a new --workdir, or the settings and data it was started with")
  if not checked and (workdir / "checkpoints").is_dir():
    raise identity.IdentityError(f"{workdir}/checkpoints exists but {workdir / IDENTITY_FILE} "
                                 "does not: cannot tell which run it belongs to; use a new "
                                 "--workdir")


def _progress(cfg: ParserTrainConfig, steps_per_epoch: int):
  """The parser's window: word-weighted CRF (and POS) loss, lr, words/s, epoch position."""

  def progress(window: Window, done: int) -> tuple[dict, list[str]]:
    loss = tag = 0.0
    words = 0
    for out in window.outs:
      loss += float(out["span_loss"]) * out["words"]
      tag += float(out["tag_loss"]) * out["words"]
      words += out["words"]
    epoch, position = divmod(done - 1, steps_per_epoch)
    record = {"loss": loss / words, "lr": float(window.outs[-1]["learning_rate"]),
              "words_per_s": window.per_second(lambda out: out["words"])}
    fields = [f"epoch {epoch} ({position + 1}/{steps_per_epoch})", f"loss {record['loss']:.4f}"]
    if cfg.tag_weight > 0:
      record["tag_loss"] = tag / words
      fields.append(f"tag loss {record['tag_loss']:.4f}")
    return record, fields + [f"lr {record['lr']:.2e}", rate_text(record["words_per_s"],
                                                                   "words/s")]

  return progress


def train(cfg: ParserTrainConfig, workdir: pathlib.Path, options: ParserTrainOptions,
          data: ParserData | None = None) -> int:
  """One parser run in `workdir` (resuming its newest checkpoint) on `data` (read from `options`
  when not given); 0 when it ended, `EXIT_INCOMPLETE` when it stopped at `max_minutes`."""
  data = data or load_data(cfg, options)
  record = run_identity(cfg, data)
  check_run(workdir, record)
  workdir.mkdir(parents=True, exist_ok=True)
  identity.write_record(workdir / IDENTITY_FILE, record)
  # Compiled steps are cached on disk, so a resumed run does not compile every bucket again.
  jax.config.update("jax_compilation_cache_dir", str((workdir / "jax_cache").resolve()))
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
  log = Log(workdir / "train_log.txt")
  started = time.time()
  kept, kept_tags = data.kept, data.kept_tags
  vocab_path = workdir / "vocabularies.json"
  if vocab_path.is_file():  # a resumed run keeps its vocabularies
    saved = json.loads(vocab_path.read_text(encoding="utf-8"))
    vocab, labels = Vocab.from_json(saved["vocab"]), LabelVocab.from_json(saved["labels"])
    tag_names = saved.get("tags", [""])
  else:
    vocab = Vocab.from_sentences([t.leaves() for t in kept], cfg.min_word_count)
    labels = LabelVocab.from_trees(kept)
    tag_names = tag_vocabulary(kept_tags)
    vocab_path.write_text(json.dumps({"vocab": vocab.to_json(), "labels": labels.to_json(),
                                      "tags": tag_names}, ensure_ascii=False), encoding="utf-8")
  tag_ids = {tag: k for k, tag in enumerate(tag_names)}
  examples = [Example(t.leaves(), binarize(t, labels, "right"),
                      None if g is None else np.array([tag_ids.get(x, 0) for x in g], np.int32))
              for t, g in zip(kept, kept_tags)]
  info = {**data.info, "pos_tags": len(tag_names) - 1, "words": len(vocab.words),
          "chars": len(vocab.chars), "labels": len(labels)}
  info = {k: info[k] for k in ("train", "dev", "test", "train_sentences", "train_words",
                               "skipped_long", "missing_documents", "untagged_sentences",
                               "pos_tags", "dev_sentences", "test_sentences", "words", "chars",
                               "labels")}
  log(f"data: {json.dumps(info)}")

  rngs = nnx.Rngs(params=cfg.seed, dropout=cfg.seed)
  scorer = SpanScorer(cfg.model, len(vocab.words), len(vocab.chars), len(labels), rngs)
  tagger = PosTagger(cfg.model, len(tag_names), rngs) if cfg.tag_weight > 0 else None
  steps_per_epoch = len(make_batches(examples, cfg, 0))  # every epoch has the same batches
  graphdef, rest, run_state = parser_state(TrainedParser(scorer, tagger, cfg.tag_weight), cfg,
                                           cfg.max_epochs * steps_per_epoch)
  meta = {"step": 0, "epoch": 0, "position": 0, "lr_scale": 1.0, "best_f1": -1.0,
          "best_epoch": -1, "bad_evals": 0, "history": [], "train_seconds": 0.0, "done": False}

  def restore(state, restored):
    meta.update(restored.extra)
    nnx.replace_by_pure_dict(state["params"], restored.state["params"])
    return {"params": state["params"],
            "opt_state": live_opt_state(state["opt_state"], restored.state["opt_state"])}

  session_start = time.time()

  def extra(step: int) -> dict:
    meta.update(step=step, epoch=step // steps_per_epoch, position=step % steps_per_epoch,
                train_seconds=base_seconds + time.time() - session_start)
    return json.loads(json.dumps(meta))  # a copy: meta changes while the save is written

  trainer = Trainer(run_state.state, cfg.max_epochs * steps_per_epoch, workdir / "checkpoints",
                    persist=Persist(target=saved_state, extra=extra, restore=restore,
                                    describe=lambda step: f"epoch {meta['epoch']}, batch "
                                    f"{meta['position']}"),
                    log=log)
  try:
    trainer.resume()
    base_seconds = meta["train_seconds"]
    if meta["done"]:  # stopped early before; a run that reached max_epochs continues
      result = None
    else:
      result = trainer.run(
          run_state.step_fn(hyperparams=lambda step: {"learning_rate": learning_rate(
              cfg, {"step": step, "lr_scale": meta["lr_scale"]}, steps_per_epoch)},
                            place=lambda batch: batch[0],
                            extra=lambda batch, sums: {"words": batch[1]}),
          _batches(cfg, examples, vocab, steps_per_epoch),
          cadence=Cadence(log_every=cfg.log_every, checkpoint_every_s=cfg.checkpoint_every_s,
                          epoch_steps=steps_per_epoch, max_seconds=60 * cfg.max_minutes),
          progress=_progress(cfg, steps_per_epoch),
          hooks=[_dev_evaluation(cfg, graphdef, rest, vocab, labels, data.dev_trees, workdir,
                                 meta, steps_per_epoch,
                                 lambda: base_seconds + time.time() - session_start, log)],
          hint="lower the learning rate")
  finally:
    trainer.close()
  if result is None:
    stop_reason = "already stopped early (delete the workdir to train again)"
  elif result.stop == TIME:
    log(f"stopping at the {cfg.max_minutes:g}-minute limit (checkpointed; run again to resume)")
    if meta["best_f1"] >= 0:
      finish(workdir, options.export, log, run_summary(info, meta, f"time limit ({cfg.max_minutes:g} "
             "minutes; resumable)", resumable=True), data.dev_trees, data.test_trees, started)
    return cli.EXIT_INCOMPLETE
  else:
    stop_reason = f"reached {cfg.max_epochs} epochs" if result.stop == END else result.stop
  return finish(workdir, options.export, log, run_summary(info, meta, stop_reason), data.dev_trees,
                data.test_trees, started)


def _batches(cfg: ParserTrainConfig, examples: list[Example], vocab: Vocab,
             steps_per_epoch: int):
  """The loop's batch of a step, (arrays, real words): epoch e's batches are
  `make_batches(…, e)`, word dropout drawn from (seed, epoch, position)."""
  keep_W = vocab.keep_probabilities(cfg.model.word_dropout)
  epochs: dict[int, list] = {}

  def batch_at(step: int):
    epoch, position = divmod(step, steps_per_epoch)
    if epoch not in epochs:
      epochs.clear()
      epochs[epoch] = make_batches(examples, cfg, epoch)
    N, indices = epochs[epoch][position]
    rng = np.random.default_rng([cfg.seed, epoch, position, 1])
    return (encode_batch(examples, N, indices, rows_for(N, cfg), vocab, cfg, keep_W, rng),
            sum(len(examples[k].words) for k in indices))

  return batch_at


def saved_state(state: dict) -> dict:
  """What a parser checkpoint holds: the parameters as a plain dict and the optimizer state in
  the layout parser runs have always saved — (clipping, AdamW) — the injected hyperparameters
  left out (they are set before every step from the step and the saved `lr_scale`)."""
  clip_state, adamw_state = state["opt_state"]
  return {"params": nnx.to_pure_dict(state["params"]),
          "opt_state": (clip_state, adamw_state.inner_state)}


def live_opt_state(template, saved):
  """`saved_state`'s optimizer state back into `parser_optimizer`'s (its update count: AdamW's)."""
  clip_state, adamw_state = saved
  count = jnp.array(optax.tree_utils.tree_get(adamw_state, "count"))  # own buffer (donated)
  return (clip_state, template[1]._replace(count=count, inner_state=adamw_state))


def _dev_evaluation(cfg: ParserTrainConfig, graphdef, rest, vocab, labels, dev_trees, workdir, meta,
                    steps_per_epoch: int, train_seconds, log) -> Hook:
  """Dev F1 every `eval_every` steps of an epoch and at its end: the best model is exported to
  WORKDIR/best, the plateau schedule decays, `patience` evaluations without gain stop the run;
  each evaluation is followed by a checkpoint."""
  eval_every = cfg.eval_every or steps_per_epoch

  def when(step: int) -> bool:
    position = (step - 1) % steps_per_epoch + 1
    return position % eval_every == 0 or position == steps_per_epoch

  def call(step: int, state) -> Action:
    epoch = (step - 1) // steps_per_epoch
    score = evaluate(graphdef, state["params"], rest, vocab, labels, dev_trees)
    improved = score.f1 > meta["best_f1"]
    meta["history"].append({"step": step, "epoch": epoch, "dev_f1": score.f1,
                            "seconds": round(train_seconds(), 1)})
    if improved:
      meta.update(best_f1=score.f1, best_epoch=epoch, bad_evals=0)
      save_parser(workdir / "best", nnx.merge(graphdef, state["params"], rest).scorer, vocab,
                  labels, {"dev_f1": score.f1, "step": step})
    else:
      meta["bad_evals"] += 1
      if cfg.schedule == "plateau" and meta["bad_evals"] % cfg.decay_patience == 0:
        meta["lr_scale"] *= cfg.lr_decay
    log(f"eval step {step} epoch {epoch}: dev F1 {score.f1:.2f} "
        f"(P {score.precision:.2f} R {score.recall:.2f} exact {score.exact_match:.2f}) "
        f"best {meta['best_f1']:.2f}{' *' if improved else ''}")
    if meta["bad_evals"] >= cfg.patience:
      meta["done"] = True
      return Action(stop=f"early stop: {cfg.patience} evaluations without a better dev F1",
                    checkpoint=True)
    return Action(checkpoint=True)

  return Hook(when, call)


def run_summary(data: dict, meta: dict, stop_reason: str, resumable: bool = False) -> dict:
  """summary.json of one run; `resumable`: cut by `max_minutes`, to be continued."""
  return {"stop": stop_reason, "resumable": resumable, "data": data,
          "best_epoch": meta["best_epoch"], "steps": meta["step"],
          "train_seconds": round(meta["train_seconds"], 1), "history": meta["history"]}


def member_finished(folder: pathlib.Path) -> bool:
  """A member run that ended (epochs reached or early stop), not one cut by `max_minutes`."""
  path = folder / "summary.json"
  if not (path.is_file() and (folder / "best").is_dir()):
    return False
  return not json.loads(path.read_text(encoding="utf-8")).get("resumable", False)


def train_ensemble(cfg: ParserTrainConfig, workdir: pathlib.Path,
                   options: ParserTrainOptions) -> int:
  """`cfg.members` runs in WORKDIR/memberK (seed + K), then their ensemble (module docstring).
  The members are a `train.sweep`: each member folder's identity.json is checked before the
  first member trains, and a finished member is used as it is only when it matches."""
  workdir.mkdir(parents=True, exist_ok=True)
  log = Log(workdir / "train_log.txt")
  started = time.time()
  member_options = dataclasses.replace(options, export=None)
  data = load_data(cfg, options)
  configs = [dataclasses.replace(cfg, seed=cfg.seed + k, members=1) for k in range(cfg.members)]
  items = [SweepItem(f"member {k}", workdir / f"member{k}", run_identity(member, data), member)
           for k, member in enumerate(configs)]

  def run(item: SweepItem) -> bool | None:
    log(f"{item.name} of {cfg.members}: training in {item.folder} (seed {item.key.seed})")
    return train(item.key, item.folder, member_options, data) == cli.EXIT_OK or None

  swept = run_sweep(items, run, record=IDENTITY_FILE, marker="summary.json",
                    check=lambda item: check_run(item.folder, item.identity),
                    finished=lambda item: True if member_finished(item.folder) else None, log=log)
  if not swept.complete:
    return cli.EXIT_INCOMPLETE
  folders = [item.folder for item in items]
  dev_trees, test_trees = data.dev_trees, data.test_trees
  ensemble.combine([folder / "best" for folder in folders], workdir / "best")
  members = [json.loads((folder / "summary.json").read_text(encoding="utf-8"))
             for folder in folders]
  log("members' dev F1 (own ∅ bias): " + ", ".join(
      f"{m['dev']['f1']:.2f}" for m in members) + "; test F1: " + ", ".join(
      f"{m['test']['f1']:.2f}" for m in members if "test" in m))
  summary = {"stop": f"ensemble of {cfg.members} members", "members": members,
             "train_seconds": round(sum(m["train_seconds"] for m in members), 1)}
  extra_files = {f"member{k}_{name}": folder / name for k, folder in enumerate(folders)
                 for name in ("train_log.txt", "summary.json")}
  return finish(workdir, options.export, log, summary, dev_trees, test_trees, started,
                extra_files)


EMPTY_BIAS_GRID = (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5)


def tune_empty_bias(parser: Parser, dev_trees, log) -> tuple[float, dict[str, float]]:
  """The ∅ bias (`Parser.empty_bias`) of the best dev F1 over `EMPTY_BIAS_GRID`; {bias: F1}."""
  words = [t.leaves() for t in dev_trees]
  results: dict[str, float] = {}
  for bias in EMPTY_BIAS_GRID:
    parser.empty_bias = bias
    results[f"{bias:g}"] = evalb.score_trees(dev_trees, parser.parse(words)).f1
  best = max(EMPTY_BIAS_GRID, key=lambda b: (results[f"{b:g}"], -b))
  parser.empty_bias = best
  log(f"empty-label bias tuned on dev: {best:g} "
      f"({', '.join(f'{b}: {f:.2f}' for b, f in results.items())})")
  return best, results


def finish(workdir, export: str | None, log, summary, dev_trees, test_trees, started,
           extra_files: dict[str, pathlib.Path] | None = None) -> int:
  """Tunes the ∅ bias of WORKDIR/best on dev, scores dev and test, writes summary.json and copies
  the model, summary and log (and `extra_files`, {exported name: path}) to `--export`."""
  stop_reason = summary["stop"]
  best = load_parser(workdir / "best")
  bias, by_bias = tune_empty_bias(best, dev_trees, log)
  summary["empty_bias"] = {"chosen": bias, "dev_f1": by_bias}
  config_path = workdir / "best" / "config.json"
  config = json.loads(config_path.read_text(encoding="utf-8"))
  config["empty_bias"] = bias
  config_path.write_text(json.dumps(config, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
  for name, trees in (("dev", dev_trees), ("test", test_trees)):
    if trees:
      score = evalb.score_trees(trees, best.parse([t.leaves() for t in trees]))
      summary[name] = {k: v for k, v in score.to_json().items() if k != "per_label"}
      log(f"best model on {name}: F1 {score.f1:.2f} (P {score.precision:.2f} R "
          f"{score.recall:.2f} exact {score.exact_match:.2f}, {score.sentences} sentences)")
  summary["wall_seconds"] = round(time.time() - started, 1)
  (workdir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
  if export:
    export = pathlib.Path(export)
    export.mkdir(parents=True, exist_ok=True)
    for f in (workdir / "best").iterdir():
      shutil.copy2(f, export / f.name)
    shutil.copy2(workdir / "summary.json", export / "summary.json")
    shutil.copy2(workdir / "train_log.txt", export / "train_log.txt")
    for name, path in (extra_files or {}).items():
      shutil.copy2(path, export / name)
    log(f"exported the best model to {export}")
  log(f"{stop_reason}; summary in {workdir / 'summary.json'}")
  return 0


if __name__ == "__main__":
  sys.exit(cli.run(main))
