"""Tinker: ``handoff`` turns training samples into Tinker datums; ``cookbook`` plugs into ``tinker_cookbook.rl``."""
