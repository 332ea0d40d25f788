"""Errors of the embedded backend's write API (the port calls raise ``ports.errors`` types)."""

from __future__ import annotations


class EmbeddedValidationError(ValueError):
    """A value given to the write API (or a JSONL import line) is invalid.

    ``field`` names the offending field; ``line`` is the 1-based line of an import file, or None.
    """

    def __init__(self, field: str, message: str, *, line: int | None = None) -> None:
        where = f"line {line}: " if line is not None else ""
        super().__init__(f"{where}{field}: {message}")
        self.field = field
        self.line = line
        self.reason = message

    def at_line(self, line: int) -> EmbeddedValidationError:
        """The same error, located at ``line`` of an import file."""
        return EmbeddedValidationError(self.field, self.reason, line=line)


class EmbeddedDatabaseError(Exception):
    """The database file cannot be opened, migrated or put in WAL mode."""


class DatabaseClosedError(Exception):
    """Work was submitted to a database that was closed (translated to a port error by stores)."""
