"""Turning trajectories into training data: samples, advantages, provenance, data from a store."""
