"""``ibex-context assemble``: one assembly in-process, with an explain table of every candidate.

The request comes from flags (``--org-id --agent-id --model`` required) or from ``--request FILE``
in the HTTP API's JSON mapping (``-`` reads stdin); the two are exclusive. The application is
opened from the environment exactly as ``serve`` opens it (embedded backend unless a memory URL /
Redis URL is configured). Output: the assembled context, a table of every candidate (included, or
why not), and a summary; ``--json`` prints the AssembleContextResponse JSON instead. Without a
request id (``--request-id`` or the file's ``requestId``) one is generated (a UUID4) and echoed.
Bad input exits 2 with one line naming the flag or field (``--request FILE: field model: ...``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

import attrs

from domain.model.assembly import AssembleRequest, AssemblyOptions, AssemblyResult
from domain.model.errors import InvalidRequestError, UnknownModelError
from domain.model.messages import Message
from entrypoints.cli.errors import CliError
from entrypoints.cli.tables import key_values, table
from entrypoints.containers import StartupError, open_application
from entrypoints.http_api.proto_json import loads_object
from entrypoints.http_api.schemas import assemble_request_from_json, assemble_response_to_json
from entrypoints.observability.correlation import request_id_or_new
from entrypoints.settings import Settings

_REQUEST_FLAGS = {  # argparse dest -> flag, for the fields a flag can set
    "org_id": "--org-id", "agent_id": "--agent-id", "model": "--model", "query": "--query",
    "messages": "--message", "tool_schemas": "--tool-schema", "max_memories": "--max-memories",
    "available_tokens": "--available-tokens", "skip_hot": "--skip-hot", "skip_cold": "--skip-cold",
    "recency_weight": "--recency-weight", "relevance_weight": "--relevance-weight",
    "usefulness_weight": "--usefulness-weight", "confidence_weight": "--confidence-weight",
    "session_id": "--session-id", "request_id": "--request-id", "trace_id": "--trace-id",
}
_FIELD_FLAGS = {  # AssembleRequest field path (as validation names it) -> flag
    **{name: f"--{name.replace('_', '-')}" for name in (
        "org_id", "agent_id", "model", "query", "available_tokens", "session_id", "request_id", "trace_id")},
    "tool_schemas": "--tool-schema", "recent_messages": "--message", "options.max_memories": "--max-memories",
    **{f"options.{w}_weight": f"--{w}-weight" for w in ("recency", "relevance", "usefulness", "confidence")},
}


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "assemble", help="run one assembly in-process and explain every candidate",
        description=__doc__.split("\n\n", 1)[1].replace("``", ""), formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    flags = parser.add_argument_group("request (from flags)")
    flags.add_argument("--org-id", help="organisation UUID (required without --request)")
    flags.add_argument("--agent-id", help="agent UUID (required without --request)")
    flags.add_argument("--model", help="model id from the catalog, e.g. gpt-4o (required without --request)")
    flags.add_argument("--query", help="text to search memories with (blank: the cold branch is skipped)")
    flags.add_argument("--message", dest="messages", action="append", metavar="ROLE:CONTENT",
                       help="a recent message, e.g. 'user:hello' (repeatable, in conversation order)")
    flags.add_argument("--tool-schema", dest="tool_schemas", action="append", metavar="TEXT",
                       help="a tool schema text to budget and append (repeatable)")
    flags.add_argument("--max-memories", metavar="N", help="keep at most the best N memories (0..100; 0: no cap)")
    flags.add_argument("--available-tokens", metavar="N", help="cap the memory budget at N tokens (0: no cap)")
    flags.add_argument("--skip-hot", action="store_true", default=None, help="do not read the hot memories")
    flags.add_argument("--skip-cold", action="store_true", default=None, help="do not search memories")
    for weight in ("recency", "relevance", "usefulness", "confidence"):
        flags.add_argument(f"--{weight}-weight", metavar="W",
                           help=f"{weight} weight (>= 0; any > 0 selects weighted_v1)")
    flags.add_argument("--session-id", help="session id carried with the request")
    flags.add_argument("--request-id", help="request id echoed in the response and sent downstream "
                                            "(default: a generated UUID4)")
    flags.add_argument("--trace-id", help="trace id echoed in the response and sent downstream")
    parser.add_argument("--request", metavar="FILE",
                        help="read an AssembleContextRequest JSON file (- for stdin) instead of flags")
    parser.add_argument("--json", action="store_true",
                        help="print the AssembleContextResponse JSON instead of the report")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    request, source = _request(args)
    request = attrs.evolve(request, request_id=request_id_or_new(request.request_id))
    settings = Settings.from_env(os.environ)
    result = asyncio.run(_assemble(settings, request, source))
    if args.json:
        print(json.dumps(assemble_response_to_json(result), indent=2, ensure_ascii=False))
    else:
        print(render_report(result))
    return 0


async def _assemble(settings: Settings, request: AssembleRequest, source: str | None) -> AssemblyResult:
    try:
        app = await open_application(settings)
    except StartupError as exc:
        raise CliError(str(exc)) from None
    try:
        return await app.assemble.execute(request)
    except InvalidRequestError as exc:
        raise CliError(f"{_where(exc.field, source)}: {exc}") from None
    except UnknownModelError as exc:
        raise CliError(f"{_where('model', source)}: {exc}") from None
    finally:
        await app.close()


def _where(field: str, source: str | None) -> str:
    if source is not None:
        return f"{source}: field {field}"
    base = field.split("[", 1)[0]
    flag = _FIELD_FLAGS.get(base, field)
    if "[" in field:
        index = int(field.split("[", 1)[1].split("]", 1)[0])
        return f"{flag} #{index + 1}"
    return flag


# ---------------------------------------------------------------- building the request


def _request(args: argparse.Namespace) -> tuple[AssembleRequest, str | None]:
    given = [flag for dest, flag in _REQUEST_FLAGS.items() if getattr(args, dest) is not None]
    if args.request is not None:
        if given:
            raise CliError(f"--request: cannot be combined with {', '.join(given)}")
        where = f"--request {args.request}"
        return _request_from_file(args.request, where), where
    missing = [flag for flag in ("--org-id", "--agent-id", "--model") if flag not in given]
    if missing:
        raise CliError(f"{', '.join(missing)}: required (or give --request FILE)")
    return _request_from_flags(args), None


def _request_from_file(path: str, where: str) -> AssembleRequest:
    """The request in ``path`` (``-``: standard input); errors start with ``where`` and say which input."""
    what = "standard input" if path == "-" else "the file"
    try:
        raw = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
        text = raw.decode("utf-8")
    except OSError as exc:
        raise CliError(f"{where}: cannot read {what}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise CliError(f"{where}: {what} is not UTF-8 text") from None
    try:
        return assemble_request_from_json(loads_object(text, what))
    except InvalidRequestError as exc:
        raise CliError(f"{_where(exc.field, where) if exc.field else where}: {exc}") from None


def _request_from_flags(args: argparse.Namespace) -> AssembleRequest:
    options = AssemblyOptions(
        skip_cold_memories=bool(args.skip_cold), skip_hot_memories=bool(args.skip_hot),
        recency_weight=_number(args.recency_weight, "--recency-weight"),
        relevance_weight=_number(args.relevance_weight, "--relevance-weight"),
        usefulness_weight=_number(args.usefulness_weight, "--usefulness-weight"),
        confidence_weight=_number(args.confidence_weight, "--confidence-weight"),
        max_memories=_integer(args.max_memories, "--max-memories"),
    )
    return AssembleRequest(
        org_id=args.org_id, agent_id=args.agent_id, model=args.model, query=args.query or "",
        recent_messages=tuple(_message(text, i) for i, text in enumerate(args.messages or ())),
        tool_schemas=tuple(args.tool_schemas or ()), options=options,
        available_tokens=_integer(args.available_tokens, "--available-tokens"),
        session_id=args.session_id or "", request_id=args.request_id or "", trace_id=args.trace_id or "",
    )


def _message(text: str, index: int) -> Message:
    role, sep, content = text.partition(":")
    if not sep or not role.strip():
        raise CliError(f"--message #{index + 1}: expected ROLE:CONTENT such as 'user:hello', got {text[:60]!r}")
    return Message(role=role.strip(), content=content)


def _integer(text: str | None, flag: str) -> int:
    if text is None:
        return 0
    try:
        return int(text.strip())
    except ValueError:
        raise CliError(f"{flag}: expected an integer, got {text!r}") from None


def _number(text: str | None, flag: str) -> float:
    if text is None:
        return 0.0
    try:
        return float(text.strip())
    except ValueError:
        raise CliError(f"{flag}: expected a number, got {text!r}") from None


# ---------------------------------------------------------------- the report


def render_report(result: AssemblyResult) -> str:
    """The context, the explain table of every candidate, and the summary."""
    return "\n\n".join((
        f"== assembled context ({result.tokens_used} tokens) ==\n{result.assembled_context}",
        f"== candidates ({len(result.memories_used)}) ==\n{explain_table(result)}",
        f"== summary ==\n{summary(result)}",
    ))


def explain_table(result: AssemblyResult) -> str:
    if not result.memories_used:
        return "(no candidates)"
    rows = [
        (i, m.memory_id or "-", m.source or "-", m.category or "-", m.composite_score, m.similarity, m.confidence,
         m.token_estimate if m.token_estimate or m.exclusion != "filter" else "-", m.detail or m.exclusion)
        for i, m in enumerate(result.memories_used, start=1)
    ]
    headers = ("#", "MEMORY ID", "SOURCE", "CATEGORY", "SCORE", "SIMILARITY", "CONFIDENCE", "TOKENS", "RESULT")
    return table(headers, rows, right=(0, 4, 5, 6, 7))


def summary(result: AssemblyResult) -> str:
    branches = table(
        ("BRANCH", "OUTCOME", "LATENCY MS", "DETAIL"),
        [(b.name, b.outcome, f"{b.latency_ms:.1f}", b.detail or "-") for b in result.branches], right=(2,),
    )
    included = sum(1 for m in result.memories_used if m.exclusion == "included")
    pairs = (
        ("degradation level", result.degradation_level),
        ("usable budget", f"{result.usable_budget} tokens (memories charged {result.memory_tokens})"),
        ("tokens used", f"{result.tokens_used} (directive {result.directive_tokens}, history {result.history_tokens})"),
        ("estimate kind", result.estimate_kind),
        ("packing path", f"{result.packing_path} (evaluated {result.metrics.candidates_evaluated})"),
        ("score schema", result.score_schema),
        ("memories", f"{included} included of {len(result.memories_used)} candidates"),
        ("total time", f"{result.metrics.total_ms:.1f} ms"),
        ("request id", result.request_id),
    )
    return f"{key_values(pairs)}\n\n{branches}"
