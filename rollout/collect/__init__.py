"""Collecting rollouts: single and group rollouts, the collector, the store and its records.

The coming executors (in-process, Ray), streaming collection and tree rollouts live here too.
"""
