"""PushdownLM: shapes and the joint loss, causality of the stack-tape bias, a tiny training run."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from slm_jax import ptb
from slm_jax.kinds import Kind
from slm_jax.linearize import base_sequence
from slm_jax.model.config import ModelConfig
from slm_jax.pushdown.model import PushdownLM, attachment_nll, joint_loss, terminal_inputs
from slm_jax.pushdown.stack import Stack
from slm_jax.structure import parse_attention, row_metadata, target_mask
from slm_jax.train import trainer

VOCAB = 40
TEXTS = ["(S (NP the cat) (VP sat (PP on (NP the mat))) .)", "(S Cats (VP chase mice))",
         "(S (NP a b) (VP c (NP d e) (PP f g)))"]


def tiny_model(seed: int = 0, **overrides) -> PushdownLM:
  config = ModelConfig(**{**dict(d_model=32, n_layers=2, n_heads=2, vocab_size=VOCAB,
                                 compute_dtype="float32", attention_impl="xla",
                                 pushdown_depths=8), **overrides})
  return PushdownLM(config, rngs=nnx.Rngs(seed))


def lin1_rows(documents: list[list[str]], width: int):
  """tokens, kinds, segment [B, width] of lin1 rows, one document per row (ids from symbols)."""
  tokens, kinds, segment = (np.zeros((len(documents), width), np.int32) for _ in range(3))
  for row, texts in enumerate(documents):
    base = base_sequence(ptb.parse_trees(" ".join(texts)))
    n = len(base)
    kinds[row, :n] = base.kinds
    segment[row, :n] = 1
    tokens[row, :n] = [sum(map(ord, s)) % (VOCAB - 1) + 1 for s in base.symbols()]
  return jnp.asarray(tokens), jnp.asarray(kinds), jnp.asarray(segment)


def lin1_targets(kinds, segment):
  """The SPEC §4 targets a lin1 training batch carries (`Batch.from_rows`)."""
  return jnp.asarray(target_mask(np.asarray(kinds), np.asarray(segment), "lin1",
                                 parse_attention("causal")))


def test_shapes_and_the_joint_loss():
  model = tiny_model(n_layers=1)
  tokens, kinds, segment = lin1_rows([TEXTS[:2], TEXTS[2:]], 48)

  @jax.jit
  def run(tokens, kinds, segment, lin1):
    rows, terms, meta, targets, tape = terminal_inputs(tokens, kinds, segment)
    logits, h = model.forward(terms, meta, tape)
    reduce, shift = model.attachment_logits(h, terms, tape)
    nll, counts = attachment_nll(model, h, terms, rows, tape, targets)
    sums = model.loss_sums({"tokens": tokens, "meta": row_metadata(kinds, segment, jnp),
                            "targets": lin1})
    return rows, logits, h, tape, reduce, shift, nll, counts, sums

  rows, logits, h, tape, reduce, shift, nll, counts, (loss_sum, sums) = run(
      tokens, kinds, segment, lin1_targets(kinds, segment))
  assert logits.shape == (2, 48, VOCAB) and h.shape == (2, 48, 32) and tape.shape == (2, 48, 48)
  assert reduce.shape == (2, 48, 48) and shift.shape == (2, 48)
  words = [7 + 3, 7]  # terminals per row; each is an attachment target, EOS and BOS are not
  assert np.asarray(counts.sum(-1)).tolist() == words
  assert np.isfinite(np.asarray(nll)).all() and float(nll.sum()) > 0
  sentence = np.asarray(rows.sentence)
  first_words = (np.asarray(rows.kind) == Kind.TERMINAL) & (sentence != np.roll(sentence, 1, -1))
  before_first = np.roll(first_words, -1, -1)  # a sentence's first word can only shift
  assert before_first.sum() == 3 and np.allclose(np.asarray(nll)[before_first], 0.0, atol=1e-6)
  assert float(sums["attach_count"]) == sum(words)
  assert float(loss_sum) == pytest.approx(float(sums["terminal_loss_sum"]
                                                + sums["attach_loss_sum"]), rel=1e-6)
  assert float(sums["count"]) == sum(words) + 2  # terminals and EOS are the LM targets


def test_the_loss_honors_the_batch_targets():
  """Pre-training's lin1 targets (every terminal and EOS) give the loss of the compact rows'
  own targets exactly; a fine-tuning mask (the last sentence and EOS) trains only its words and
  their attachments."""
  model = tiny_model(n_layers=1)
  tokens, kinds, segment = lin1_rows([TEXTS[:2], TEXTS[2:]], 48)
  meta = row_metadata(kinds, segment, jnp)
  loss = jax.jit(model.loss_sums)

  @jax.jit
  def unrestricted(tokens, kinds, segment):  # the loss before targets were read
    return joint_loss(model, *terminal_inputs(tokens, kinds, segment))

  targets = lin1_targets(kinds, segment)
  got, want = loss({"tokens": tokens, "meta": meta, "targets": targets}), unrestricted(
      tokens, kinds, segment)
  for key in want[1]:
    assert float(got[1][key]) == float(want[1][key]), key
  # Row 0: only its second sentence "(S Cats (VP chase mice))" and EOS are targets; it starts
  # where the first sentence's own row has its EOS.
  start = len(base_sequence(ptb.parse_trees(TEXTS[0]))) - 1
  second = np.zeros(kinds.shape, bool)
  second[0, start:] = True
  masked = targets & jnp.asarray(second)
  _, sums = loss({"tokens": tokens, "meta": meta, "targets": masked})
  assert float(sums["count"]) == 3 + 1  # Cats chase mice, EOS
  assert float(sums["attach_count"]) == 3  # the three words' attachments
  assert float(sums["terminal_loss_sum"]) < float(want[1]["terminal_loss_sum"])


def _tape(attachments: list[int]) -> np.ndarray:
  stack, rows = Stack(len(attachments)), []
  for e, a in enumerate(attachments):
    if e == 1:
      stack.start_sentence()
    stack.push(e, a)
    rows.append(stack.depth.copy())
  return np.stack(rows)


def test_the_stack_tape_bias_uses_only_the_past():
  """Gradients of position t's outputs vanish for every later input; two tapes that agree up
  to token t give the same outputs up to t (and differ after)."""
  model = tiny_model(n_layers=1, pushdown_depths=6)
  model.depth_embed[...] = model.depth_embed[...] * 50  # make the bias matter
  T = 9
  kinds = np.array([[Kind.BOS] + [Kind.TERMINAL] * (T - 2) + [Kind.EOS]], np.int8)
  meta = row_metadata(jnp.asarray(kinds), jnp.ones((1, T), jnp.int32), jnp)
  tokens = jnp.arange(1, T + 1, dtype=jnp.int32)[None]
  # Same attachments up to token 4, different after (both valid shift-reduce sequences).
  one, two = [0, 1, 1, 3, 4, 3, 2, 7, 8], [0, 1, 1, 3, 4, 5, 6, 3, 8]
  tape_one, tape_two = (jnp.asarray(_tape(a))[None] for a in (one, two))
  assert (tape_one[0, :5] == tape_two[0, :5]).all() and not (tape_one == tape_two).all()
  x = model.decoder.embed(tokens)

  @jax.jit
  def outputs(x_BTD, tape):
    logits, h = model.forward(tokens, meta, tape, embeddings_BTD=x_BTD)
    reduce, shift = model.attachment_logits(h, tokens, tape)
    return logits, jnp.where(jnp.tril(jnp.ones((T, T), bool)), reduce, 0.0), shift

  def per_query(x_BTD):  # [T]: everything query t outputs (reduce logits over keys ≤ t only)
    logits, reduce, shift = outputs(x_BTD, tape_one)
    return logits[0].sum(-1) + reduce[0].sum(-1) + shift[0]

  jacobian = np.abs(np.asarray(jax.jit(jax.jacrev(per_query))(x))).sum(-1)[:, 0]  # [T, T]
  assert (np.triu(jacobian, 1) == 0).all() and (np.diag(jacobian) > 0).all()
  a, b = outputs(x, tape_one), outputs(x, tape_two)
  for got, want in zip(a, b):
    np.testing.assert_allclose(np.asarray(got[0, :5]), np.asarray(want[0, :5]), atol=1e-5)
  assert not np.allclose(np.asarray(a[0][0, 5:]), np.asarray(b[0][0, 5:]), atol=1e-3)


def test_bad_configuration_is_named():
  with pytest.raises(ValueError, match="pushdown_depths"):
    tiny_model(pushdown_depths=0)


@pytest.mark.slow  # ~40 s on 2 cores (mostly compiling); test_train runs pushdown 12 steps too
def test_a_tiny_run_trains_through_the_trainer(tmp_path):
  from tests.test_train import losses, small_config  # pylint: disable=g-import-not-at-top
  summary = trainer.train(small_config("pushdown", steps=10), tmp_path)
  curve = [loss for _, loss in losses(tmp_path)]
  assert len(curve) == 10 and sum(curve[-3:]) < sum(curve[:3]) - 0.9, curve
  assert summary.eval_terminal_ppl > 1


def test_the_configuration_and_the_model_section_agree():
  from slm_jax.train import run_config as config_builder  # pylint: disable=g-import-not-at-top
  run = config_builder.validate(config_builder.build("pushdown", "tiny"))
  assert run.model.pushdown_depths == config_builder.PUSHDOWN_DEPTHS
  assert run.resolved.reference == "pushdown" and run.resolved.linearization == "lin1"
  with pytest.raises(config_builder.ConfigError, match="model.pushdown_depths must be > 0"):
    run.replace(**{"model.pushdown_depths": 0})
  with pytest.raises(config_builder.ConfigError, match="live SG/BLiMP metrics"):
    run.replace(**{"train.eval_syntax_every": 5})
  tree = config_builder.validate(config_builder.build("tree", "tiny"))
  with pytest.raises(config_builder.ConfigError, match="must be 0"):
    tree.replace(**{"model.pushdown_depths": 8})
