"""``python -m figures.llm_column``: `figures.llm_column.main`."""

from figures.llm_column import main

raise SystemExit(main())
