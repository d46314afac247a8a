"""Progress for people, `testbed.util.progress` (shared with llm_scale and theory), under the testbed's name."""

from testbed.util.progress import Progress, interactive

__all__ = ["Progress", "interactive"]
