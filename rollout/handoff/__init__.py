"""Hand-off of training samples to trainers: Tinker, PyTRIO, verl (torch), JSONL."""
