"""CLI error type and exit codes."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2


class CliError(Exception):
    """Bad input on the command line; printed as one line, exit code 2."""
