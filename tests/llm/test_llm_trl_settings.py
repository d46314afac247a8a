"""The TRL plugin's settings import without trl; the trainers' module re-exports the same objects."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

WITHOUT_TRL = """
import json, sys
from types import SimpleNamespace
sys.modules["trl"] = sys.modules["transformers"] = None  # any import of them fails
from llm_scale.integrations import trl_settings as s
recipe = s.compose_recipe("ppo", SimpleNamespace(loss_type="dapo", epsilon=0.1, epsilon_high=0.3, delta=2.0))
try:
    s.compose_recipe("dg", SimpleNamespace(loss_type="sapo"))
    refused = ""
except ValueError as exc:
    refused = str(exc)
try:
    import llm_scale.integrations.trl
    trainers = "imported"
except ImportError as exc:
    trainers = str(exc)
print(json.dumps({"eps": [recipe.surrogate.lo_eps, recipe.surrogate.hi_eps, recipe.surrogate.dual_clip],
                  "settings": len(s.GRPO_SETTINGS), "supported": list(s.SUPPORTED_TRL), "refused": refused,
                  "trainers": trainers, "loaded": sorted(m for m in ("trl", "transformers") if sys.modules.get(m))}))
"""


def test_settings_and_compose_recipe_work_without_trl():
    out = subprocess.run([sys.executable, "-c", WITHOUT_TRL], capture_output=True, text=True, cwd=ROOT, timeout=120,
                         env={"PYTHONPATH": str(ROOT), "PATH": ""})  # fmt: skip
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["eps"] == [0.1, 0.3, 2.0] and got["supported"] == ["1.16.0", "1.17.0"] and got["settings"] > 60
    assert got["refused"].startswith("GRPOConfig.loss_type='sapo' is a surrogate of its own") and "\n" not in got["refused"]
    assert got["trainers"].startswith("llm_scale.integrations.trl needs trl") and got["loaded"] == []


def test_the_trainers_module_re_exports_the_settings():
    pytest.importorskip("trl")
    from llm_scale.integrations import trl, trl_settings

    for name in ("GRPO_SETTINGS", "TRAINING_ARGS_SETTINGS", "SUPPORTED_TRL", "LOSS_TYPES", "compose_recipe", "TRL_CLIP_MAPPING"):
        assert getattr(trl, name) is getattr(trl_settings, name)
