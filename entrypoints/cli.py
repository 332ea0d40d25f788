"""The ``ibex-context`` command line."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import attrs

from entrypoints.settings import Settings, SettingsError

EXIT_BAD_INPUT = 2


def _cmd_config(args: argparse.Namespace) -> int:
    settings = Settings.from_env(os.environ)
    for name, value in attrs.asdict(settings).items():
        shown = "***" if value and name in {"memory_api_token"} else value
        print(f"{name} = {shown}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ibex-context", description="Ibex context assembly service.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    config = commands.add_parser("config", help="validate the IBEX_CONTEXT_* environment and print the settings")
    config.set_defaults(handler=_cmd_config)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except SettingsError as exc:
        print(f"ibex-context: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    raise SystemExit(main())
