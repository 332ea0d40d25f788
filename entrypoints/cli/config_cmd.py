"""``ibex-context config``: validate the environment and print the effective settings.

One ``name = value`` line per declared setting (``entrypoints.settings``; secrets masked), then a
last line saying whether tracing is on and where spans go (``tracing = on: OTLP ... to URL``).
``--markdown`` prints the README's configuration tables instead, from the same declarations.
"""

from __future__ import annotations

import argparse
import os

from entrypoints.observability.tracing import describe as describe_tracing
from entrypoints.settings import SERVICE_PREFIX, TRACING_PREFIX, Settings, effective_lines, markdown_table


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "config", help="validate the IBEX_CONTEXT_* environment and print the effective settings"
    )
    parser.add_argument("--markdown", action="store_true",
                        help="print the README's configuration tables (every setting, its default, what it "
                             "accepts) instead; the environment is not read")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.markdown:
        print(f"{markdown_table(SERVICE_PREFIX)}\n\n{markdown_table(TRACING_PREFIX)}")
        return 0
    settings = Settings.from_env(os.environ)
    for line in effective_lines(settings):
        print(line)
    print(f"tracing = {describe_tracing(settings)}")
    return 0
