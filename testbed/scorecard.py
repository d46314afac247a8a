"""The scorecard format, `testbed.util.scorecard` (shared with llm_scale), under the testbed's name."""

from testbed.util.scorecard import (
    BATTERY_VERSION,
    CARD_FIELDS,
    CELL_FIELDS,
    DEFAULT_DIR,
    SCHEME,
    SHIPPED_DIR,
    ScorecardError,
    check,
    find,
    passes,
    path_for,
    provenance,
    read,
    slug,
    stale_reasons,
    write,
)

__all__ = ["BATTERY_VERSION", "CARD_FIELDS", "CELL_FIELDS", "DEFAULT_DIR", "SCHEME", "SHIPPED_DIR", "ScorecardError",
           "check", "find", "passes", "path_for", "provenance", "read", "slug", "stale_reasons", "write"]
