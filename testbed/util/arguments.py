"""The project's argument parser: argparse whose errors are one line.

A bad argument raises `testbed.util.errors.UsageError` (the command prints it as one ``error:`` line and exits 2)
instead of argparse's usage block; ``--help`` is argparse's. Used by every command line of the project that is
not derived from a dataclass (those parse with tyro, `llm_scale.config.parse`)."""

from __future__ import annotations

import argparse
import re
from typing import Any, NoReturn

from testbed.util.errors import UsageError


class ArgumentParser(argparse.ArgumentParser):
    """argparse with one-line errors: a bad argument raises `UsageError` instead of printing usage."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # "--lr -1e-3" is a (bad) value, not an unknown option: negative numbers in any float notation
        self._negative_number_matcher = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|nan)$", re.I)

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> Any:
        # "--steps=--" is the value "--" (argparse would drop it and hand the option an empty list)
        if arg_strings == ["--"] and action.nargs is None and action.option_strings:
            value = self._get_value(action, "--")
            self._check_value(action, value)
            return value
        return super()._get_values(action, arg_strings)

    def error(self, message: str) -> NoReturn:
        # "argument --steps/-s: must be ..." -> "--steps must be ..."; other argparse messages keep their text
        match = re.match(r"argument ([^:/ ]+)(?:/[^:]+)?: (.*)", message, flags=re.S)
        if match:
            name, rest = match.groups()
            message = f"{name} {rest}" if rest.startswith("must be") else f"{name}: {rest}"
        raise UsageError(message)
