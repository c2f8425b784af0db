"""PyTRIO: ``handoff`` turns training samples into PyTRIO datums; ``sampling_policy`` samples with its client."""
