"""What tracing adds to one assembly, in process CPU: off, on at 100% sampling, on at 1%.

One process runs the AssembleContext use case (I/O answered in-process with a real hot list and
search answer from the loopback memory stand-in, as in ``bench.floors``) inside the edge's server
span (``EdgeTracing.grpc_call``, the same call the gRPC servicer makes, then ``annotate_assembly``),
three ways: tracing off (no SDK: the port's null tracer, no server span), on with every call
sampled, and on with ``parentbased_traceidratio`` 0.01 (calls bring no ``traceparent``, so the
ratio decides). "On" is the real SDK: a private TracerProvider, the bounded batch processor and
the OTLP/HTTP exporter, sending to a collector in another process (``tests.support.otlp_receiver
--discard``) so that its CPU is not ours. Each round ends with ``force_flush``, so the encoding
and sending of the round's spans is counted in the round (process CPU covers every thread).

Rounds alternate the three (off, 100%, 1%, off, ...); each figure is CPU microseconds per call,
median and range over the rounds. The difference to "off" is what tracing costs an assembly;
``bench.load --env OTEL_EXPORTER_OTLP_ENDPOINT=...`` shows the same against the whole service.

    .venv/bin/python -m bench.tracing_cost [--calls 400] [--rounds 7]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time

from adapters.json_model_catalog import JsonModelCatalog
from adapters.memory_http import HttpMemorySource
from adapters.otel_tracing import OpenTelemetryStages
from adapters.secrets_nonce_source import SecretsNonceSource
from adapters.system_clock import SystemClock
from adapters.text_profiles import CachedTextProfiles
from adapters.token_counters import TokenCountersRegistry
from domain.model.assembly import AssembleRequest
from domain.model.directive import Directive
from domain.model.memory import HotQuery, SearchQuery
from domain.model.messages import Message
from domain.usecases.assemble_context import AssembleContext
from entrypoints.observability.tracing import EdgeTracing, Tracing, annotate_assembly, open_tracing
from entrypoints.settings import Settings
from ports.tracing import NO_TRACER, Tracer
from tests.support.memory_server import MemoryServerProcess
from tests.unit.usecases.scripted import ScriptedDirectiveStore, ScriptedMemorySource

QUERY = "dark theme python deploy budget weekly report"
LIMIT = 40
SERVICE, METHOD = "ibex.context.v1.ContextAssemblyService", "AssembleContext"
METADATA = (("user-agent", "grpc-go/1.70"), ("content-type", "application/grpc"))  # what a proxy sends, no traceparent


async def main_async(args: argparse.Namespace) -> None:
    memory = MemoryServerProcess.launch("--seed-demo", "200")
    try:
        source = HttpMemorySource(memory.base_url, memory.token, pool_size=2)
        hot = await source.hot(HotQuery(memory.org_id, memory.agent_id, LIMIT), timeout_s=2.0)
        cold = await source.search(SearchQuery(memory.org_id, memory.agent_id, QUERY, LIMIT), timeout_s=2.0)
        await source.close()
    finally:
        memory.close()
    request = AssembleRequest(org_id=memory.org_id, agent_id=memory.agent_id, model="gpt-4o", query=QUERY,
                              available_tokens=2000, request_id="bench-tracing",
                              recent_messages=(Message("user", "What did we decide about the weekly budget report?"),))
    counters = TokenCountersRegistry()
    counters.preload()

    def use_case(tracer: Tracer) -> AssembleContext:
        return AssembleContext(
            directives=ScriptedDirectiveStore(Directive("Answer briefly and cite the memory ids you used.")),
            memories=ScriptedMemorySource(hot=hot, cold=cold), catalog=JsonModelCatalog.builtin(), counters=counters,
            clock=SystemClock(), nonces=SecretsNonceSource(), profiles=CachedTextProfiles(), tracer=tracer,
            config=Settings().assembly_config(hot_limit=LIMIT, cold_limit=LIMIT, wall_s=1.0, directive_timeout_s=1.0,
                                              hot_timeout_s=1.0, cold_timeout_s=1.0))

    collector = subprocess.Popen([sys.executable, "-m", "tests.support.otlp_receiver", "--discard"],
                                 stdout=subprocess.PIPE, text=True)
    try:
        assert collector.stdout is not None
        endpoint = collector.stdout.readline().strip()
        setups: dict[str, tuple[Tracing, AssembleContext]] = {"off": (Tracing(), use_case(NO_TRACER))}
        for name, env in (("on, 100%", {}), ("on, 1%", {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                                                        "OTEL_TRACES_SAMPLER_ARG": "0.01"})):
            tracing = open_tracing(Settings.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, **env}))
            assert tracing.tracer is not None
            setups[name] = (tracing, use_case(OpenTelemetryStages(tracing.tracer)))

        async def call(edge: EdgeTracing, assemble: AssembleContext) -> None:
            with edge.grpc_call(SERVICE, METHOD, METADATA) as span:
                annotate_assembly(await assemble.execute(request))
                span.grpc_status("OK", 0)

        async def round_us(tracing: Tracing, assemble: AssembleContext) -> float:
            for _ in range(50):  # warm-up
                await call(tracing.edge, assemble)
            if tracing.processor is not None:
                tracing.processor.force_flush()
            started = time.process_time()
            for _ in range(args.calls):
                await call(tracing.edge, assemble)
            if tracing.processor is not None:
                tracing.processor.force_flush()  # the round's spans encoded and sent, on this clock
            return (time.process_time() - started) * 1e6 / args.calls

        figures: dict[str, list[float]] = {name: [] for name in setups}
        for _ in range(args.rounds):
            for name, (tracing, assemble) in setups.items():
                figures[name].append(await round_us(tracing, assemble))
        off = statistics.median(figures["off"])
        print(f"process CPU per assembly, {args.calls} calls a round, {args.rounds} rounds alternated "
              f"(server span + use case + export)")
        print(f"{'tracing':<10} {'median us':>10} {'min':>8} {'max':>8} {'vs off':>8}")
        for name, values in figures.items():
            median = statistics.median(values)
            print(f"{name:<10} {median:>10.0f} {min(values):>8.0f} {max(values):>8.0f} {median - off:>+8.0f}")
        for tracing, _ in setups.values():
            await tracing.close()
    finally:
        collector.terminate()
        collector.wait(timeout=10)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="CPU per assembly with tracing off, on at 100%, on at 1%")
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=7)
    asyncio.run(main_async(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
