"""``ibex-context config``: validate the environment and print the effective settings.

The last line says whether tracing is on and where spans go (``tracing = on: OTLP ... to URL``).
"""

from __future__ import annotations

import argparse
import os
import re

import attrs

from entrypoints.observability.tracing import describe as describe_tracing
from entrypoints.settings import Settings

_SECRETS = frozenset({"memory_api_token"})
_URLS = frozenset({"redis_url", "otel_exporter_otlp_endpoint", "otel_exporter_otlp_traces_endpoint"})
_URL_SECRETS = re.compile(r"(?<=://)[^@/]*(?=@)|(?<=sentinel_password=)[^&]*")  # userinfo, sentinel password


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "config", help="validate the IBEX_CONTEXT_* environment and print the effective settings"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    settings = Settings.from_env(os.environ)
    for name, value in attrs.asdict(settings).items():
        shown = "***" if value and name in _SECRETS else value
        if name in _URLS and value:
            shown = _URL_SECRETS.sub("***", value)
        print(f"{name} = {shown}")
    print(f"tracing = {describe_tracing(settings)}")
    return 0
