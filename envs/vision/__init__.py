"""Images in observations: content-addressed pixels, the model's image processor, and
renderers that put each image's placeholder run into the token list.

``images`` names and bounds images (a pixel hash, PNG bytes); ``processing`` is the
model's image processor (the Qwen-VL family's grid and merge size) and the one place
a placeholder count is computed; ``parts`` are the message content parts a text env
writes (``{"type": "image", "image": ...}``); ``render`` extends the chat and
continuation renderers with them. The token-level types are in
:mod:`agentenvs.envs.types` (:class:`~agentenvs.envs.types.ImagePlacement`).
"""
