"""TRL: ``rollout_func`` runs multi-turn episodes inside ``GRPOTrainer``; ``weight_sync`` keeps vLLM on its weights."""
