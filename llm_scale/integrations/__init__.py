"""Plugins for existing RL engines: `llm_scale.integrations.verl` and `llm_scale.integrations.trl` (optional extras)."""
