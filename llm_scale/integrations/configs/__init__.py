"""Ready-to-use verl configs (Hydra YAML) selecting the stabilizer losses and gradient transforms.

``python -m llm_scale.integrations.configs`` prints this directory, for verl's ``--config-path``.
"""

from pathlib import Path

CONFIG_DIR = Path(__file__).resolve().parent
