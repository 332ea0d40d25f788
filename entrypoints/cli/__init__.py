"""The ``ibex-context`` command line: one module per command group, each with ``register()``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from entrypoints.cli import assemble_cmd, catalog_cmd, config_cmd, data_cmd, principal_cmd, serve_cmd
from entrypoints.cli.errors import EXIT_BAD_INPUT, CliError
from entrypoints.settings import SettingsError

COMMAND_MODULES = (serve_cmd, assemble_cmd, catalog_cmd, data_cmd, principal_cmd, config_cmd)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ibex-context", description="Ibex context assembly service.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except (SettingsError, CliError) as exc:
        print(f"ibex-context: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
