"""Instructions per assembly: the use case and its proto answer, counted by valgrind, not timed.

On a shared 2-core VM the CPU time of the same code moves by 20% or more from one run to the
next (the hypervisor's steal decides much of it), which hides any change worth less than that.
Instructions executed do not depend on the machine's load: two runs of one tree agree within
about 1%, so a change of a few percent shows. It is not a time (cache misses and branch
mispredictions are not in it), so it ranks changes to the code; ``bench.load`` stays the figure
for what the service costs.

How: the loopback memory stand-in answers the bench.load workload once (hot 50, search 20 of the
chosen corpus); then two workers run the AssembleContext use case on those answers (I/O answered
in-process, relevance_v1 with every hot memory allowed to reach the packer, 2,000 tokens, exact
tiktoken counts, real nonces) plus ``assembly_to_proto``, under ``valgrind --tool=cachegrind
--cache-sim=no``: one makes ``--warmup`` + ``--base`` calls, the other ``--calls`` more. The
difference of their instruction counts divided by ``--calls`` is what one more assembly costs:
start-up, imports and the warm-up cancel out.

    .venv/bin/python -m bench.instructions [--corpus varied narrow] [--calls 200]

Needs valgrind (Debian package ``valgrind``); a worker runs about 30x slower under it.
"""

from __future__ import annotations

import argparse
import asyncio
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import attrs

from adapters.json_model_catalog import JsonModelCatalog
from adapters.memory_http import HttpMemorySource
from adapters.secrets_nonce_source import SecretsNonceSource
from adapters.system_clock import SystemClock
from adapters.text_profiles import CachedTextProfiles
from adapters.token_counters import TokenCountersRegistry
from bench.load import QUERY
from domain.model.assembly import AssembleRequest
from domain.model.directive import Directive
from domain.model.memory import HotQuery, SearchQuery
from domain.model.messages import Message
from domain.usecases.assemble_context import AssembleContext
from entrypoints.settings import Settings
from entrypoints.translation import assembly_to_proto
from tests.support.memory_server import MemoryServerProcess
from tests.unit.usecases.scripted import ScriptedDirectiveStore, ScriptedMemorySource

HOT_LIMIT, COLD_LIMIT, AVAILABLE_TOKENS = 50, 20, 2000  # bench.load's workload
_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


@attrs.frozen
class Workload:
    org_id: str
    agent_id: str
    hot: object  # MemoryBatch
    cold: object


async def fetch(corpus: str) -> Workload:
    memory = MemoryServerProcess.launch("--seed-demo", "200", "--corpus", corpus)
    try:
        source = HttpMemorySource(memory.base_url, memory.token, pool_size=2)
        try:
            hot = await source.hot(HotQuery(memory.org_id, memory.agent_id, HOT_LIMIT), timeout_s=5.0)
            cold = await source.search(SearchQuery(memory.org_id, memory.agent_id, QUERY, COLD_LIMIT), timeout_s=5.0)
        finally:
            await source.close()
    finally:
        memory.close()
    return Workload(memory.org_id, memory.agent_id, hot, cold)


async def work(workload: Workload, calls: int) -> int:
    """Run ``calls`` assemblies and their proto answers; returns the candidates of the last one."""
    counters = TokenCountersRegistry()
    counters.preload()
    config = Settings().assembly_config(hot_limit=HOT_LIMIT, cold_limit=COLD_LIMIT, wall_s=1.0, directive_timeout_s=1.0,
                                        hot_timeout_s=1.0, cold_timeout_s=1.0)
    config = attrs.evolve(config, relevance=attrs.evolve(config.relevance, hot_slots=HOT_LIMIT))  # as bench.load sets it
    use_case = AssembleContext(
        directives=ScriptedDirectiveStore(Directive("Answer briefly and cite the memory ids you used.")),
        memories=ScriptedMemorySource(hot=workload.hot, cold=workload.cold),  # type: ignore[arg-type]
        catalog=JsonModelCatalog.builtin(), counters=counters, clock=SystemClock(), nonces=SecretsNonceSource(),
        profiles=CachedTextProfiles(), config=config)
    request = AssembleRequest(
        org_id=workload.org_id, agent_id=workload.agent_id, model="gpt-4o", query=QUERY,
        available_tokens=AVAILABLE_TOKENS, request_id="bench-instructions",
        recent_messages=(Message("user", "What did we decide about the weekly budget report?"),))
    candidates = 0
    for _ in range(calls):
        result = await use_case.execute(request)
        assembly_to_proto(result)
        candidates = len(result.memories_used)
    return candidates


def counted(valgrind: str, workload_file: Path, calls: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [valgrind, "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
         sys.executable, "-m", "bench.instructions", "--worker", str(workload_file), "--worker-calls", str(calls)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def instructions(process: subprocess.Popen[str]) -> int:
    out, err = process.communicate()
    found = _REFS.search(err)
    if process.returncode != 0 or not found:
        raise SystemExit(f"a worker under valgrind failed (exit {process.returncode}):\n{err[-2000:]}")
    return int(found.group(1).replace(",", ""))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", nargs="+", default=["varied", "narrow"], choices=["varied", "narrow"])
    parser.add_argument("--calls", type=int, default=200, help="the assemblies counted (the difference of the two runs)")
    parser.add_argument("--base", type=int, default=50, help="assemblies in both runs besides the warm-up")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--worker-calls", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        workload = pickle.loads(Path(args.worker).read_bytes())
        asyncio.run(work(workload, args.worker_calls))
        return
    if args.calls < 1 or args.base < 0 or args.warmup < 0:
        parser.error("--calls must be >= 1, --base and --warmup >= 0")
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        print("bench.instructions: valgrind is not installed (apt-get install -y valgrind)", file=sys.stderr)
        raise SystemExit(2)
    print(f"instructions per assembly (use case + proto answer; {args.calls} assemblies counted, valgrind cachegrind)")
    print(f"{'corpus':<8} {'candidates':>10} {'instructions/assembly':>22}")
    with tempfile.TemporaryDirectory() as folder:
        for corpus in args.corpus:
            workload = asyncio.run(fetch(corpus))
            candidates = asyncio.run(work(workload, 1))  # the answers decode and assemble outside valgrind too
            path = Path(folder) / f"{corpus}.pickle"
            path.write_bytes(pickle.dumps(workload))
            short = counted(valgrind, path, args.warmup + args.base)
            long = counted(valgrind, path, args.warmup + args.base + args.calls)
            per_call = (instructions(long) - instructions(short)) / args.calls
            print(f"{corpus:<8} {candidates:>10} {per_call:>22,.0f}", flush=True)


if __name__ == "__main__":
    main()
