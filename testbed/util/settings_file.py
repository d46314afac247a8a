"""An experiment's settings file, read once: TOML (``.toml``) or YAML (``.yaml``, ``.yml``) into a dict of tables.

The one reader of the files that define experiments: a testbed sweep (testbed/sweep_file.py), an LLM study and
its pilots (llm_scale/study, llm_scale/pocket_design). Every way a file can be unusable (missing, a directory, an
unknown extension, unreadable, malformed, not a table at top level) is a `UsageError` of one line that names the
file; what its tables may hold is the reader's caller's to check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from testbed.util.errors import UsageError

SUFFIXES = (".toml", ".yaml", ".yml")


def read_settings(path: str | Path, what: str = "settings file") -> dict[str, Any]:
    """The tables of the settings file at ``path``; ``what`` names the file in errors (e.g. "sweep file")."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{what} {str(path)!r} is a directory; give a .toml or .yaml file")
    if not path.is_file():
        raise UsageError(f"{what} {str(path)!r} does not exist")
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise UsageError(f"{what} {str(path)!r}: unknown extension {suffix!r}; use .toml, .yaml or .yml")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {what} {str(path)!r}: {exc}") from None
    try:
        if suffix == ".toml":
            try:
                import tomllib
            except ModuleNotFoundError:  # Python 3.10
                import tomli as tomllib  # type: ignore[no-redef]
            data = tomllib.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as exc:  # parser errors of either format
        raise UsageError(f"{what} {str(path)!r} is malformed: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{what} {str(path)!r} must hold a table/mapping at top level, got {type(data).__name__}")
    return data


def imported_modules(spec: dict[str, Any]) -> list[str]:
    """A settings file's ``imports``: the modules of the user's own stabilizers to import first (a list of module
    names; [] when absent); one-line `UsageError` otherwise."""
    imports = spec.get("imports", [])
    if not isinstance(imports, list) or not all(isinstance(m, str) and m.strip() for m in imports):
        raise UsageError(f"imports must be a list of module names, e.g. imports = [\"mystab\"], got {imports!r}")
    return imports
