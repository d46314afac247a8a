"""``python -m llm_scale.pocket_design``: `llm_scale.pocket_design.main`."""

from llm_scale.pocket_design import main

raise SystemExit(main())
