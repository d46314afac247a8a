"""The project's argument parser: argparse whose errors are one line.

`ArgumentParser`: a bad argument raises `testbed.util.errors.UsageError` (the command prints it as one ``error:``
line and exits 2) instead of argparse's usage block; ``--help`` is argparse's. `CommandLine`: the same for a
script's own ``main``, which prints the line and exits 2 itself. Every command line of the project that is not
derived from a dataclass (those parse with tyro, `llm_scale.config.parse`) uses one of them."""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any, NoReturn

from testbed.util.errors import EXIT_USAGE, UsageError, one_line


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


class CommandLine(ArgumentParser):
    """`ArgumentParser` for a script's ``main``: a bad command line prints its one ``error:`` line on stderr and exits
    2 (SystemExit, as argparse does), without argparse's usage block."""

    def error(self, message: str) -> NoReturn:
        try:
            super().error(message)
        except UsageError as exc:
            print(f"error: {one_line(exc)}", file=sys.stderr)
            raise SystemExit(EXIT_USAGE) from None
