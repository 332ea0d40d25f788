"""``ibex-context memory|directive|demo``: manage the embedded backend (IBEX_CONTEXT_DATA_PATH)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from typing import AsyncIterator

import attrs

from adapters.embedded import EmbeddedDirectiveStore, EmbeddedMemoryStore, EmbeddedValidationError
from entrypoints.cli import demo_data
from entrypoints.cli.errors import CliError
from entrypoints.containers import StartupError, build_container, shut_down
from entrypoints.settings import Settings


@attrs.frozen
class _Stores:
    memories: EmbeddedMemoryStore
    directives: EmbeddedDirectiveStore


@asynccontextmanager
async def _open_stores() -> AsyncIterator[_Stores]:
    """The embedded stores from the composition root (whatever backend serving would select)."""
    settings = Settings.from_env(os.environ)
    if not settings.uses_embedded_memory:
        print("note: IBEX_CONTEXT_MEMORY_BASE_URL is set; this manages the embedded file only", file=sys.stderr)
    container = build_container(settings)
    try:
        try:
            stores = _Stores(await container.adapters.embedded_memories(), await container.adapters.embedded_directives())
        except StartupError as exc:  # "IBEX_CONTEXT_DATA_PATH: cannot open ..."
            raise CliError(str(exc)) from exc
        try:
            yield stores
        finally:
            await stores.memories.close()
            await stores.directives.close()
    finally:
        await shut_down(container)  # the embedded file


def _run(work: Callable[[_Stores], Awaitable[int]]) -> int:
    async def main() -> int:
        async with _open_stores() as stores:
            try:
                return await work(stores)
            except EmbeddedValidationError as exc:
                raise CliError(str(exc)) from exc

    return asyncio.run(main())


class _ProgressLine:
    """``done/total`` on stderr: redrawn in place on a terminal (every 1%), else a line per 25%.

    Safe to call from a worker thread.
    """

    def __init__(self, label: str) -> None:
        self._label = label
        self._lock = threading.Lock()
        self._shown = -1
        self._tty = sys.stderr.isatty()
        self._step = 1 if self._tty else 25

    def __call__(self, done: int, total: int) -> None:
        percent = 100 * done // max(1, total)
        with self._lock:
            if percent // self._step == self._shown // self._step and done != total:
                return
            if percent == self._shown:
                return
            self._shown = percent
            line = f"{self._label}: {done}/{total} ({percent}%)"
            print(f"\r{line}" if self._tty else line, end="" if self._tty else "\n", file=sys.stderr, flush=True)

    def finish(self) -> None:
        if self._tty and self._shown >= 0:
            print(file=sys.stderr)


async def _memory_add(args: argparse.Namespace, stores: _Stores) -> int:
    memory_id = await stores.memories.add(
        org_id=args.org_id, agent_id=args.agent_id, content=args.content, category=args.category,
        confidence=args.confidence, usefulness=args.usefulness, tags=args.tag or (), memory_id=args.memory_id,
    )
    print(memory_id)
    return 0


async def _memory_import(args: argparse.Namespace, stores: _Stores) -> int:
    if not os.path.isfile(args.file):
        raise CliError(f"FILE: no such file {args.file!r}")
    progress = _ProgressLine(f"importing {args.file}")
    try:
        count = await stores.memories.import_jsonl(args.file, progress=progress)
    except EmbeddedValidationError as exc:  # "FILE: line N: FIELD: problem", exit 2, nothing stored
        raise CliError(f"{args.file}: {exc}" if exc.line is not None else str(exc)) from exc
    finally:
        progress.finish()
    print(f"imported {count} memories from {args.file}")
    return 0


async def _memory_list(args: argparse.Namespace, stores: _Stores) -> int:
    for memory in await stores.memories.list(args.org_id, args.agent_id, args.limit):
        row = attrs.asdict(memory) if attrs.has(type(memory)) else dict(vars(memory))
        print(json.dumps(row, default=str, ensure_ascii=False))
    return 0


async def _memory_delete(args: argparse.Namespace, stores: _Stores) -> int:
    if not await stores.memories.delete(args.org_id, args.agent_id, args.memory_id):
        raise CliError(f"memory_id: no memory {args.memory_id} for this org and agent")
    print(f"deleted {args.memory_id}")
    return 0


async def _directive_set(args: argparse.Namespace, stores: _Stores) -> int:
    version = await stores.directives.set_directive(args.org_id, args.agent_id, args.content, args.injection_mode)
    print(version)
    return 0


async def _directive_get(args: argparse.Namespace, stores: _Stores) -> int:
    directive = await stores.directives.get_directive(args.org_id, args.agent_id)
    if directive is None:
        raise CliError("no directive for this org and agent")
    print(json.dumps(attrs.asdict(directive), ensure_ascii=False))
    return 0


async def _demo_load(args: argparse.Namespace, stores: _Stores) -> int:
    existing = await stores.memories.list(demo_data.DEMO_ORG, demo_data.SUPPORT_AGENT, 1)
    if existing and not args.force:
        print("demo data already loaded (use --force to add it again)")
        return 0
    memories = demo_data.demo_memories()
    progress = _ProgressLine("loading demo memories")
    for done, memory in enumerate(memories, start=1):
        await stores.memories.add(
            org_id=memory.org_id, agent_id=memory.agent_id, content=memory.content, category=memory.category,
            confidence=memory.confidence, usefulness=memory.usefulness, tags=memory.tags, created_at=memory.created_at,
        )
        progress(done, len(memories))
    progress.finish()
    for agent_id, content in demo_data.DIRECTIVES.items():
        await stores.directives.set_directive(demo_data.DEMO_ORG, agent_id, content)
    print(f"loaded {len(memories)} memories and {len(demo_data.DIRECTIVES)} directives for org {demo_data.DEMO_ORG}")
    return 0


def _handler(work: Callable[[argparse.Namespace, _Stores], Awaitable[int]]) -> Callable[[argparse.Namespace], int]:
    return lambda args: _run(lambda stores: work(args, stores))


def _tenant(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--org-id", required=True, help="organisation UUID")
    parser.add_argument("--agent-id", required=True, help="agent UUID")


def register(commands: argparse._SubParsersAction) -> None:
    memory = commands.add_parser("memory", help="manage memories in the embedded backend").add_subparsers(
        dest="memory_command", required=True, metavar="ACTION")
    add = memory.add_parser("add", help="store one memory and print its id")
    _tenant(add)
    add.add_argument("--content", required=True, help="the memory text")
    add.add_argument("--category", required=True, help="procedural|factual|preference|behavioral|episodic or another label")
    add.add_argument("--confidence", type=float, default=1.0, help="in [0, 1] (default 1.0)")
    add.add_argument("--usefulness", type=float, default=0.5, help="in [0, 1] (default 0.5)")
    add.add_argument("--tag", action="append", help="a tag (repeatable)")
    add.add_argument("--memory-id", default=None, help="UUID to use (default: a new one)")
    add.set_defaults(handler=_handler(_memory_add))
    imp = memory.add_parser("import", help="import a JSONL file, all or nothing (format: see the README)")
    imp.add_argument("file", metavar="FILE.jsonl", help="one JSON memory per line")
    imp.set_defaults(handler=_handler(_memory_import))
    lst = memory.add_parser("list", help="print the tenant's memories as JSON lines, newest first")
    _tenant(lst)
    lst.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    lst.set_defaults(handler=_handler(_memory_list))
    delete = memory.add_parser("delete", help="delete one memory of the tenant")
    _tenant(delete)
    delete.add_argument("--memory-id", required=True, help="the memory UUID")
    delete.set_defaults(handler=_handler(_memory_delete))

    directive = commands.add_parser("directive", help="manage directives in the embedded backend").add_subparsers(
        dest="directive_command", required=True, metavar="ACTION")
    dset = directive.add_parser("set", help="store (or replace) the agent's directive; prints its version id")
    _tenant(dset)
    dset.add_argument("--content", required=True, help="the directive text")
    dset.add_argument("--injection-mode", default="system_first", help="system_first|system_append|user_prepend")
    dset.set_defaults(handler=_handler(_directive_set))
    dget = directive.add_parser("get", help="print the agent's directive as JSON")
    _tenant(dget)
    dget.set_defaults(handler=_handler(_directive_get))

    demo = commands.add_parser("demo", help="the demo data set").add_subparsers(dest="demo_command", required=True, metavar="ACTION")
    load = demo.add_parser("load", help="load the demo org, agents, directives and memories (skipped when present)")
    load.add_argument("--force", action="store_true", help="load again even when demo data is present")
    load.set_defaults(handler=_handler(_demo_load))
