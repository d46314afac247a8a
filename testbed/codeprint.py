"""The fingerprint of the code a testbed run ran, stored in its record, so that a finished run is reused only by
the code that made it.

A run's fingerprint (`run_code`) has one digest (`testbed.util.codeprint.source_digest`) per part: each recipe
component (``surrogate softis``, ``advantage auto``, ``transform gac``), the task (``task mnist``) and the
training loop (``loop``: `testbed.runner.Runner`, the staleness model and the frictions, and what they call).
Editing a component, a helper it calls, the task or the loop changes that part's digest; editing a comment, a
docstring or the layout does not, nor editing code the run does not reach. `testbed.util.codeprint.stale_parts`
compares a record's fingerprint with the current one and names the parts that changed; a record without one
(written before runs carried it) is not judged: the run store reuses it and says so.
"""

from __future__ import annotations

from typing import Any

from testbed.util.codeprint import recipe_code, source_digest


def run_code(spec: Any, task: Any) -> dict[str, str]:
    """The fingerprint of the code a run of ``spec`` (a `testbed.config.RunSpec`) on ``task`` runs, by part."""
    return _code(spec, type(task))


def config_code(config: Any) -> dict[str, str]:
    """`run_code` of a `testbed.config.RunConfig`, parsed; the task is not built: its class is what the fingerprint
    reads (`testbed.tasks.make_task` gives an instance of `testbed.tasks.task_class`)."""
    from testbed.tasks import task_class

    spec = config.parse()
    return _code(spec, task_class(spec.config.task))


def _code(spec: Any, task_type: type) -> dict[str, str]:
    from testbed.runner import Runner

    out = recipe_code(spec.recipe)
    out[f"task {spec.config.task}"] = source_digest(task_type)
    out["loop"] = source_digest(Runner, type(spec.staleness), type(spec.frictions))
    return out
