"""OpenEnv both ways: our text environments on OpenEnv's wire (:mod:`.server`), and any
OpenEnv environment under our collector (:mod:`.adapter`). Needs the ``openenv`` extra."""
