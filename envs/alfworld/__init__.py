"""ALFWorld household text games on the real ALFWorld / TextWorld PDDL engine.

Modules: ``config`` (the registered :class:`ALFWorldConfig`), ``env`` (episode task
logic and the token-level env), ``actions`` and ``prompts`` (the model-facing
protocol), ``games`` (finding games on disk), ``pool`` and ``worker`` (engine
processes), ``scenes`` and ``build_games`` (the games shipped under ``data/``).
Importing this package imports neither TextWorld nor ALFWorld.
"""
