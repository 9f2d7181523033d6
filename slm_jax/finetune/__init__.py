"""Fine-tuning a trained run on XSum or BoolQ (SPEC §11), in one place: the command
(`python -m slm_jax.finetune`, `__main__`), the trainer of its seeds (`trainer`: each seed a run
of the one `train.state.initial_state` / `Trainer`), and its settings section with the packaged
configs (`settings`, `configs/`). The rows it trains on — instruction, loss mask, truncation — are
the tasks' (`downstream.finetune_data`), shared with the evaluation of the fine-tuned seeds
(`downstream.run`), which also reads the seed folders' files named there."""
