"""Plugins for existing RL engines: `llm_scale.integrations.verl` and `llm_scale.integrations.trl` (optional extras;
`llm_scale.integrations.trl_settings` holds the TRL plugin's settings and imports without trl)."""
