"""Policies the collector can drive: scripted, replay, interactive, Hugging Face, OpenAI-compatible."""
