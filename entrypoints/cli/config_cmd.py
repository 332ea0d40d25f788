"""``ibex-context config``: validate the environment and print the effective settings."""

from __future__ import annotations

import argparse
import os

import attrs

from entrypoints.settings import Settings

_SECRETS = frozenset({"memory_api_token"})


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "config", help="validate the IBEX_CONTEXT_* environment and print the effective settings"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    settings = Settings.from_env(os.environ)
    for name, value in attrs.asdict(settings).items():
        shown = "***" if value and name in _SECRETS else value
        print(f"{name} = {shown}")
    return 0
