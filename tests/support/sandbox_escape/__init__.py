"""Adversarial programs and the backends they are run against (see test_sandbox_escape.py)."""
