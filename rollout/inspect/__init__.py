"""Looking at a run before training on it: ``check``, the chat-template check, the viewer."""
