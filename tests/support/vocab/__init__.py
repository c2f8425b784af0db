"""Real tokenizer vocabularies (Qwen2.5, Qwen3, DeepSeek-V3) built offline for tests.

See ``NOTES.md`` in this folder for where each piece comes from.
"""

from support.vocab.builders import VOCABULARIES, load_vocabulary, shared_vocabulary

__all__ = ["VOCABULARIES", "load_vocabulary", "shared_vocabulary"]
