"""Layer-wise UUAS structural probe (SPEC §10, last bullet; GTCA seed `001_…`; Hewitt & Manning).

What it measures. For every layer ℓ (0 = the input embeddings, ℓ ≥ 1 = the residual stream after
block ℓ, as `Decoder.hidden`'s `observe` hook sees it) a rank-k distance probe B_ℓ ∈ ℝ^{k×D} is
trained so that d_B(h_i, h_j) = ||B(h_i − h_j)||² matches the gold tree distance between words i and
j (L1 loss, each sentence's sum over pairs divided by n², Adam). The predicted tree is the minimum
spanning tree of the predicted distances (Prim); UUAS = gold undirected edges recovered / gold
edges, summed over the test corpus (micro average, as Hewitt & Manning's reporting code).
`uuas.json` also holds each layer's Spearman ρ (per sentence over all word pairs, averaged over
sentences) and the UUAS of the linear-chain baseline (every word attached to its right
neighbour).

Gold tree and punctuation: `slm_jax.gtca.probe_trees` (head-rule dependencies; its docstring
says why that edge definition); the CLI `python -m slm_jax.gtca.probe` reads the probed
sentences from PTB files.

Word vectors: piece-per-word encoding — every word is encoded on its own by the model's tokenizer
(`Tokenizer.encode_word`, i.e. `" " + word` for BPE bases with PTB escapes undone; for an HF
checkpoint the same convention through its tokenizer.json), preceded by BOS when the tokenizer has
one. This is exactly how slm_jax feeds terminal words to its models (no character-offset alignment
to get wrong), and for byte-level BPE with whitespace pre-tokenization it equals encoding the
space-joined sentence. A word's vector is the mean of its pieces' states. The decoder runs once per
batch (rows padded to length buckets, `jax.jit`), all layers collected through `observe`.

Side branch ("backbone vs GTCA"): `word_vectors(..., side=f)` passes a fixed `side(layer, x_BTD)`
hook to every forward (jitted); `side_for=g` calls `g(batch: ProbeBatch)` once per batch and uses
the returned hook for that batch (run eagerly, since it closes over per-batch data;
`batch_size=1` makes it per example). `branch=(arrays_for, build)` is the jitted form of the
latter: `arrays_for(batch)` gives a pytree of arrays per batch (a GTCA branch's chunk layout and
parameters), passed to the jitted forward, where `build(x_BTD, arrays)` (x = the embedded inputs)
returns the hook. `ProbeBatch` carries the token ids, each token's word index and the
sentences.

Training runs all layers at once (parameters [L, k, D], one jitted Adam step; Adam is elementwise,
so this is L independent probes). Each layer's features are divided by their training-set RMS
before training (the scale is folded back into B, so the probe family is unchanged) so one
learning rate suits every layer. A fixed number of steps, no early stopping.
"""

from __future__ import annotations

import json
import pathlib
import tempfile
from typing import Callable, NamedTuple, Sequence

import numpy as np

from slm_jax import cli
from slm_jax.gtca.probe_trees import EDGE_DEFINITION, ProbeSentence, min_spanning_tree, tree_edges

RESULTS_FILE = "uuas.json"
PLOT_FILE = "uuas.png"

# --- word vectors -------------------------------------------------------------------------------


class ProbeBatch(NamedTuple):
  """What a per-batch side hook (`side_for`) is given."""

  tokens_BT: np.ndarray      # int32 token ids (padding 0)
  word_index_BT: np.ndarray  # int32: each token's index in its sentence's `words` (-1: BOS/pad)
  sentences: list[ProbeSentence]  # the batch's rows (padding rows are not listed)


LayerSide = Callable  # side(layer, x_BTD) -> delta_BTD (slm_jax.model.decoder)


SentenceEncoder = Callable[[ProbeSentence], tuple[np.ndarray, np.ndarray]]  # → (ids [T], word [T])


def encode(s: ProbeSentence, encode_word: Callable[[str], Sequence[int]],
           bos_id: int | None) -> tuple[np.ndarray, np.ndarray]:
  """(token ids [T], word index of each token [T], -1 for BOS): piece-per-word encoding."""
  ids, index = ([bos_id], [-1]) if bos_id is not None else ([], [])
  for w, word in enumerate(s.words):
    pieces = list(encode_word(word))
    if not pieces:
      raise ValueError(f"word {w} {word!r} of sentence {' '.join(s.words)[:80]!r} encodes to no "
                       "pieces")
    ids.extend(pieces)
    index.extend([w] * len(pieces))
  return np.asarray(ids, np.int32), np.asarray(index, np.int32)


def _forward(graphdef, layers: tuple[int, ...]):
  """states [L, B, W, D] (float32) of the chosen layers, averaged per kept word (avg_BWT)."""
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from flax import nnx  # pylint: disable=import-outside-toplevel

  def run(state, tokens_BT, meta, avg_BWT, side, branch=None):
    model = nnx.merge(graphdef, state)
    x_BTD = model.embed(tokens_BT)
    if branch is not None:  # (build, arrays): the hook of this batch, built under jit
      side = branch[0](x_BTD, branch[1])
    states = [x_BTD]
    model.hidden(x_BTD, meta, side=side, observe=lambda layer, x: states.append(x))
    h_LBTD = jnp.stack([states[layer] for layer in layers]).astype(jnp.float32)
    used_BT = avg_BWT.sum(1) > 0  # padding states never reach a word, not even as 0 · NaN
    h_LBTD = jnp.where(used_BT[None, :, :, None], h_LBTD, 0.0)
    return jnp.einsum("bwt,lbtd->lbwd", avg_BWT, h_LBTD)
  return run


def word_vectors(model, sentences: Sequence[ProbeSentence], encode_word: Callable[[str], Sequence[int]],
                 bos_id: int | None = None, *, layers: Sequence[int] | None = None,
                 batch_size: int = 16, side: LayerSide | None = None,
                 side_for: Callable[[ProbeBatch], LayerSide] | None = None,
                 branch: tuple[Callable, Callable] | None = None,
                 log: Callable[[str], None] | None = None,
                 encode_sentence: SentenceEncoder | None = None) -> np.ndarray:
  """float32 [L, M, D]: the kept words' vectors (mean of their pieces' states) of every sentence,
  concatenated in order (M = Σ n; `offsets(sentences)` locates each sentence), for `layers`
  (default all: 0 = embeddings, ℓ = after block ℓ). `side` / `side_for` / `branch`: module
  docstring. `encode_sentence` (ids [T], word index [T]) replaces the piece-per-word `encode`."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from flax import nnx  # pylint: disable=import-outside-toplevel
  from slm_jax.buckets import bucket  # pylint: disable=import-outside-toplevel
  from slm_jax.hf.scoring import plain_rows  # pylint: disable=import-outside-toplevel
  if sum(x is not None for x in (side, side_for, branch)) > 1:
    raise ValueError("word_vectors: give one of side, side_for and branch")
  n_layers = model.config.n_layers
  layers = tuple(range(n_layers + 1)) if layers is None else tuple(int(l) for l in layers)
  if not layers or min(layers) < 0 or max(layers) > n_layers:
    raise ValueError(f"layers {list(layers)} must be in [0, {n_layers}] (0 = embeddings)")
  encoded = [encode_sentence(s) if encode_sentence else encode(s, encode_word, bos_id)
             for s in sentences]
  vocab = model.config.vocab_size
  for i, (ids, _) in enumerate(encoded):
    if ids.size and (ids.min() < 0 or ids.max() >= vocab):
      raise ValueError(f"sentence {i}: token id outside the model's vocabulary [0, {vocab})")
  start_M = offsets(sentences)
  out = np.zeros((len(layers), int(start_M[-1]), model.config.d_model), np.float32)
  graphdef, state = nnx.split(model)
  run = _forward(graphdef, layers)
  jitted = jax.jit(lambda st, t, m, a: run(st, t, m, a, side))
  if branch is not None:
    arrays_for, build = branch
    jitted_branch = jax.jit(lambda st, t, m, a, arrays: run(st, t, m, a, None, (build, arrays)))
  order = sorted(range(len(sentences)), key=lambda i: len(encoded[i][0]))
  batches = range(0, len(order), batch_size)
  for number, begin in enumerate(batches):
    chunk = order[begin:begin + batch_size]
    width = bucket(max(len(encoded[i][0]) for i in chunk), 16)
    rows = bucket(len(chunk), 1, batch_size)
    words = bucket(max(sentences[i].n for i in chunk), 8)
    tokens, meta = plain_rows([encoded[i][0] for i in chunk], width, rows)
    word_index = np.full((rows, width), -1, np.int32)
    avg_BWT = np.zeros((rows, words, width), np.float32)
    for r, i in enumerate(chunk):
      index_T = encoded[i][1]
      word_index[r, :len(index_T)] = index_T
      hit_NT = sentences[i].kept[:, None] == word_index[r][None, :]
      avg_BWT[r, :sentences[i].n] = hit_NT / hit_NT.sum(1, keepdims=True)
    args = (jnp.asarray(tokens), jax.tree.map(jnp.asarray, meta), jnp.asarray(avg_BWT))
    if branch is not None:
      h_LBWD = jitted_branch(state, *args, arrays_for(
          ProbeBatch(tokens, word_index, [sentences[i] for i in chunk])))
    elif side_for is None:
      h_LBWD = jitted(state, *args)
    else:  # a per-batch hook closes over this batch's data: run eagerly
      h_LBWD = run(state, *args, side_for(ProbeBatch(tokens, word_index,
                                                     [sentences[i] for i in chunk])))
    h_LBWD = np.asarray(h_LBWD)
    for r, i in enumerate(chunk):
      out[:, start_M[i]:start_M[i + 1]] = h_LBWD[:, r, :sentences[i].n]
    if log is not None and (number + 1 == len(batches) or (number + 1) % 20 == 0):
      log(f"features: batch {number + 1}/{len(batches)}")
  return out


def offsets(sentences: Sequence[ProbeSentence]) -> np.ndarray:
  """[N + 1] start of each sentence's words in a [L, M, D] feature array (last = M)."""
  return np.concatenate([[0], np.cumsum([s.n for s in sentences])]).astype(np.int64)


# --- the probe ----------------------------------------------------------------------------------


def _batch(sentences: Sequence[ProbeSentence], start_M: np.ndarray, chosen: Sequence[int]):
  """(word rows idx_BW into M, mask_BW, gold d_BWW, n_B) of these sentences, W a bucket."""
  from slm_jax.buckets import bucket  # pylint: disable=import-outside-toplevel
  width = bucket(max(sentences[i].n for i in chosen), 8)
  idx_BW = np.zeros((len(chosen), width), np.int32)
  mask_BW = np.zeros((len(chosen), width), np.float32)
  d_BWW = np.zeros((len(chosen), width, width), np.float32)
  for r, i in enumerate(chosen):
    n = sentences[i].n
    idx_BW[r, :n] = np.arange(start_M[i], start_M[i] + n)
    mask_BW[r, :n] = 1
    d_BWW[r, :n, :n] = sentences[i].distances
  return idx_BW, mask_BW, d_BWW, mask_BW.sum(1)


def _squared_distances(p_LBWK):
  """||p_i − p_j||² [L, B, W, W] without materializing the differences."""
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  norm_LBW = jnp.sum(p_LBWK * p_LBWK, -1)
  gram = jnp.einsum("lbwk,lbvk->lbwv", p_LBWK, p_LBWK)
  return norm_LBW[..., :, None] + norm_LBW[..., None, :] - 2 * gram


def probe_loss(B_LKD, h_LMD, idx_BW, mask_BW, d_BWW, n_B):
  """Per-layer L1 loss [L]: mean over sentences of Σ_ij |d_B − d_gold| / n² (Hewitt & Manning)."""
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  p_LBWK = jnp.einsum("lbwd,lkd->lbwk", h_LMD[:, idx_BW], B_LKD)
  error_LBWW = jnp.abs(_squared_distances(p_LBWK) - d_BWW) * (mask_BW[:, :, None]
                                                             * mask_BW[:, None, :])
  return jnp.mean(error_LBWW.sum((-1, -2)) / (n_B * n_B), axis=-1)


def _batch_order(rng: np.random.Generator, n: int, batch_size: int, steps: int) -> np.ndarray:
  """[steps, batch] sentence indices: epochs of `rng` permutations, a new one when the rest of
  the current one holds less than a batch (the order every probe step draws its batch in)."""
  order, cursor, out = rng.permutation(n), 0, []
  for _ in range(steps):
    if cursor + batch_size > len(order):
      order, cursor = rng.permutation(n), 0
    out.append(order[cursor:cursor + batch_size])
    cursor += batch_size
  return np.asarray(out)


def train_probes(h_LMD: np.ndarray, sentences: Sequence[ProbeSentence], *, rank: int = 64,
                 steps: int = 2000, batch_size: int = 32, learning_rate: float = 1e-3,
                 seed: int = 0, log: Callable[[str], None] | None = None,
                 log_every: int = 200) -> tuple[np.ndarray, list[float]]:
  """(B [L, rank, D] for raw features, final per-layer training loss) of one distance probe per
  layer, trained on `sentences` (whose features `h_LMD` are, in order); epochs of shuffled
  batches."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  import optax  # pylint: disable=import-outside-toplevel
  from slm_jax.train.loop import Cadence  # pylint: disable=import-outside-toplevel
  from slm_jax.train.state import Trainer  # pylint: disable=import-outside-toplevel
  if not sentences:
    raise ValueError("train_probes: no training sentences")
  start_M = offsets(sentences)
  if h_LMD.shape[1] != start_M[-1]:
    raise ValueError(f"train_probes: features hold {h_LMD.shape[1]} words, the sentences "
                     f"{start_M[-1]}")
  n_layers, _, dim = h_LMD.shape
  scale_L = 1.0 / np.maximum(np.sqrt(np.mean(np.square(h_LMD - h_LMD.mean(1, keepdims=True)),
                                             axis=(1, 2))), 1e-12)
  h_device = jnp.asarray(h_LMD * scale_L[:, None, None].astype(np.float32))
  rng = np.random.default_rng(seed)
  # Unit-variance coordinates: ||h_i − h_j||² ≈ 2D, so this init starts d_B near 2 (gold
  # distances are a few edges) rather than orders of magnitude off.
  B_LKD = jnp.asarray(rng.normal(0, 1 / np.sqrt(rank * dim), (n_layers, rank, dim)),
                      jnp.float32)
  tx = optax.adam(learning_rate)

  @jax.jit  # the features are an argument: a closed-over array would be baked into the program
  def step(B_LKD, opt_state, h_LMD, idx_BW, mask_BW, d_BWW, n_B):
    def total(B):
      losses_L = probe_loss(B, h_LMD, idx_BW, mask_BW, d_BWW, n_B)
      return losses_L.sum(), losses_L
    (_, losses_L), grad = jax.value_and_grad(total, has_aux=True)(B_LKD)
    updates, opt_state = tx.update(grad, opt_state, B_LKD)
    return optax.apply_updates(B_LKD, updates), opt_state, losses_L

  batch_size = min(batch_size, len(sentences))
  chosen_SB = _batch_order(rng, len(sentences), batch_size, steps)
  last = [float("nan")] * n_layers

  def step_fn(state, batch, number):
    del number
    B, opt_state, losses_L = step(state["B"], state["opt_state"], h_device, *batch)
    return {"B": B, "opt_state": opt_state}, {"losses": losses_L, "loss": losses_L.sum()}

  def progress(window, done):
    nonlocal last
    total_L = np.zeros(n_layers)  # float64, summed in step order
    for out in window.outs:
      total_L = total_L + np.asarray(out["losses"])
    last = (total_L / len(window.outs)).tolist()
    return {"loss_by_layer": last}, ["loss by layer [" + " ".join(f"{v:.3f}" for v in last)
                                     + "]"]

  with tempfile.TemporaryDirectory(prefix="probe_") as folder:  # seconds of training: no resume
    trainer = Trainer({"B": B_LKD, "opt_state": tx.init(B_LKD)}, steps, folder,
                      log=log or (lambda line: None), label="probe ")
    try:
      result = trainer.run(step_fn, lambda number: tuple(map(jnp.asarray, _batch(
          sentences, start_M, chosen_SB[number]))), progress=progress,
                           cadence=Cadence(log_every=log_every),
                           loss_of=lambda out: float(out["loss"]),
                           hint="lower the probe's learning rate")
    finally:
      trainer.close()
  B_LKD = result.state["B"]
  return np.asarray(B_LKD) * scale_L[:, None, None], last


def predicted_distances(B_LKD: np.ndarray, h_LMD: np.ndarray,
                        sentences: Sequence[ProbeSentence]) -> list[list[np.ndarray]]:
  """[layer][sentence] → predicted squared distances [n, n] (float64)."""
  p_LMK = np.einsum("lmd,lkd->lmk", h_LMD.astype(np.float64), B_LKD.astype(np.float64))
  start_M = offsets(sentences)
  out = []
  for p_MK in p_LMK:
    layer = []
    for i in range(len(sentences)):
      p_NK = p_MK[start_M[i]:start_M[i + 1]]
      diff_NNK = p_NK[:, None, :] - p_NK[None, :, :]
      layer.append(np.einsum("ijk,ijk->ij", diff_NNK, diff_NNK))
    out.append(layer)
  return out


def uuas(distances: Sequence[np.ndarray], sentences: Sequence[ProbeSentence]) -> float:
  """Gold edges recovered by the MST of `distances` / gold edges, over all sentences."""
  found = sum(len(min_spanning_tree(d) & tree_edges(s.heads)) for d, s in zip(distances, sentences))
  total = sum(s.n - 1 for s in sentences)
  return found / total if total else float("nan")


def linear_baseline_uuas(sentences: Sequence[ProbeSentence]) -> float:
  """UUAS of the chain attaching every probed word to the next one."""
  found = sum(len({(i, i + 1) for i in range(s.n - 1)} & tree_edges(s.heads)) for s in sentences)
  return found / max(1, sum(s.n - 1 for s in sentences))


def spearman(distances: Sequence[np.ndarray], sentences: Sequence[ProbeSentence]) -> float:
  """Mean over sentences (≥ 3 probed words) of Spearman ρ between predicted and gold distances over
  all word pairs i < j (a simplification of Hewitt & Manning's per-word DSpr.); constant
  predictions count as ρ = 0."""
  from scipy import stats  # pylint: disable=import-outside-toplevel
  values = []
  for d, s in zip(distances, sentences):
    if s.n < 3:
      continue
    upper = np.triu_indices(s.n, 1)
    if np.ptp(d[upper]) == 0:  # constant predictions (e.g. all words <unk>) carry no order
      values.append(0.0)
      continue
    values.append(float(stats.spearmanr(d[upper], s.distances[upper]).statistic))
  return float(np.mean(values)) if values else float("nan")


def evaluate(B_LKD: np.ndarray, h_LMD: np.ndarray,
             sentences: Sequence[ProbeSentence]) -> tuple[list[float], list[float]]:
  """(UUAS per layer, Spearman per layer) of trained probes on test features."""
  per_layer = predicted_distances(B_LKD, h_LMD, sentences)
  return ([uuas(d, sentences) for d in per_layer], [spearman(d, sentences) for d in per_layer])


# --- plot ---------------------------------------------------------------------------------------


def plot(results: Sequence[tuple[str, dict]], out: str | pathlib.Path) -> None:
  """UUAS by layer, one line per (label, uuas.json contents); the linear baseline dashed (once,
  in grey, when every result has the same one: the same test sentences)."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  import matplotlib.ticker  # pylint: disable=import-outside-toplevel,unused-import
  figure, axis = plt.subplots(figsize=(6.5, 4.5))
  colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
  baselines = {r.get("linear_baseline_uuas") for _, r in results} - {None}
  shared = len(baselines) == 1 and all(r.get("linear_baseline_uuas") is not None
                                       for _, r in results)
  for index, (label, result) in enumerate(results):
    color = colors[index % len(colors)]
    axis.plot(result["layers"], result["uuas"], "-", marker=".", color=color, label=label)
    if result.get("linear_baseline_uuas") is not None and not shared:
      axis.axhline(result["linear_baseline_uuas"], linestyle="--", color=color, alpha=0.5,
                   label=f"{label}: linear baseline")
  if shared:
    axis.axhline(baselines.pop(), linestyle="--", color="grey", alpha=0.7,
                 label="linear baseline (each word → its right neighbour)")
  axis.set(title="structural probe: UUAS by layer", xlabel="layer (0 = embeddings)",
           ylabel="UUAS")
  axis.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
  axis.grid(alpha=0.3)
  axis.legend(fontsize=7)
  figure.tight_layout()
  figure.savefig(out, dpi=110)
  plt.close(figure)


def read_results(path: str | pathlib.Path) -> dict:
  path = pathlib.Path(path)
  try:
    result = json.loads(path.read_text())
  except FileNotFoundError:
    raise cli.CliError(f"{path}: no such file (a probe's {RESULTS_FILE})") from None
  except json.JSONDecodeError as error:
    raise cli.CliError(f"{path}: not valid JSON ({error})") from None
  if not isinstance(result, dict) or not {"layers", "uuas"} <= result.keys():
    raise cli.CliError(f"{path}: not a probe result (needs 'layers' and 'uuas')")
  return result


def probe_model(model, encode_word: Callable[[str], Sequence[int]], bos_id: int | None,
                train: Sequence[ProbeSentence], test: Sequence[ProbeSentence], out: str | pathlib.Path, *,
                layers: Sequence[int] | None = None, label: str = "model", rank: int = 64,
                steps: int = 2000, batch_size: int = 32, learning_rate: float = 1e-3,
                forward_batch: int = 16, seed: int = 0, side: LayerSide | None = None,
                side_for: Callable[[ProbeBatch], LayerSide] | None = None,
                branch: tuple[Callable, Callable] | None = None,
                log: Callable[[str], None] | None = None, extra: dict | None = None,
                encode_sentence: SentenceEncoder | None = None) -> dict:
  """The whole probe of one model: features of `train`/`test`, one probe per layer, UUAS and
  Spearman on `test`; writes `out/uuas.json` and `out/uuas.png` and returns the result."""
  log = log or (lambda line: None)
  n_layers = model.config.n_layers
  layer_ids = list(range(n_layers + 1)) if layers is None else [int(l) for l in layers]
  log(f"probe {label}: {len(train)} train / {len(test)} test sentences "
      f"({sum(s.n for s in train)} / {sum(s.n for s in test)} probed words), "
      f"{n_layers} blocks, D={model.config.d_model}, layers {layer_ids}")
  features = dict(layers=layer_ids, batch_size=forward_batch, side=side, side_for=side_for,
                  branch=branch, log=log, encode_sentence=encode_sentence)
  h_train = word_vectors(model, train, encode_word, bos_id, **features)
  h_test = word_vectors(model, test, encode_word, bos_id, **features)
  B_LKD, train_loss = train_probes(h_train, train, rank=rank, steps=steps, batch_size=batch_size,
                                   learning_rate=learning_rate, seed=seed, log=log,
                                   log_every=max(1, min(200, steps)))
  scores, rhos = evaluate(B_LKD, h_test, test)
  result = {
      "label": label, **(extra or {}), "layers": layer_ids, "uuas": scores, "spearman": rhos,
      "train_loss": train_loss, "linear_baseline_uuas": linear_baseline_uuas(test),
      "train_sentences": len(train), "test_sentences": len(test),
      "test_edges": sum(s.n - 1 for s in test), "rank": rank, "steps": steps,
      "batch_size": batch_size, "learning_rate": learning_rate, "seed": seed,
      "side": ("side" if side else "side_for" if side_for else "branch" if branch else None),
      "edges": EDGE_DEFINITION, "punctuation": "excluded (not probed, not in gold edges)",
  }
  out = pathlib.Path(out)
  out.mkdir(parents=True, exist_ok=True)
  (out / RESULTS_FILE).write_text(json.dumps(result, indent=1) + "\n")
  plot([(label, result)], out / PLOT_FILE)
  for layer, score, rho in zip(layer_ids, scores, rhos):
    log(f"layer {layer}{' (embeddings)' if layer == 0 else ''}: UUAS {score:.3f} "
        f"spearman {rho:.3f}")
  log(f"linear baseline UUAS {result['linear_baseline_uuas']:.3f}; wrote {out / RESULTS_FILE}, "
      f"{out / PLOT_FILE}")
  return result
