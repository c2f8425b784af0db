"""JSONL: ``handoff`` writes and reads training samples as one JSON object a line (no dependency)."""
