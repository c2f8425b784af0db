"""TRL GRPO arguments that run on this CPU machine (shared by the TRL tests)."""

from __future__ import annotations


def cpu_grpo_args(output_dir, **overrides):
    """TRL's GRPOConfig for a small CPU run: groups of 2, no KL term, no saving.
    TRL's ``max_completion_length`` does not bound a ``rollout_func``; the env does."""
    from trl import GRPOConfig

    settings = dict(
        output_dir=str(output_dir),
        per_device_train_batch_size=4,
        num_generations=2,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        bf16=False,
        save_strategy="no",
        max_completion_length=256,
        beta=0.0,
        seed=0,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    return GRPOConfig(**{**settings, **overrides})
