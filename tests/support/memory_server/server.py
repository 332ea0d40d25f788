"""MemoryServer: the loopback memory service, its state, its handlers, and its thread."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

from aiohttp import web

from tests.support.memory_server import records
from tests.support.memory_server.faults import FaultSwitches, corrupt, huge_answer, reset_connection
from tests.support.memory_server.records import ANY_ORG, LoggedRequest, RawRequest, StoredMemory

Producer = Callable[[web.Request, str, bytes], web.Response]
_ANSWER_LIMIT = 1024  # rendered answers kept; a full cache is emptied and refilled


class MemoryServer(FaultSwitches):
    """The fake memory service. State sits behind one lock; HTTP runs in a thread of its own.

    Fault switches (hold/release, set_latency, force_status, malform_body, inject_*,
    reset_connections, huge_body, clear_faults) come from FaultSwitches; ``requests()`` is the
    request log and ``connections_accepted`` counts TCP connections. Agent ids are global (as in the real
    service): each has one owner org.

    Hot path (load benchmarks): a good hot/search answer is rendered once per (org, endpoint, query
    string or body) and kept until memories, agents or feedback change; fault switches apply on top
    of the kept answer. The request log keeps the last ``log_limit`` requests, unparsed until read.
    """

    def __init__(self, *, seed: int = 0, log_limit: int = 10_000,
                 loop_factory: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop) -> None:
        super().__init__(seed)
        self._loop_factory = loop_factory
        self._lock = threading.Lock()
        self._tokens: dict[str, str] = {}
        self._agents: dict[str, str] = {}
        self._memories: dict[str, StoredMemory] = {}
        self._log: deque[RawRequest] = deque(maxlen=log_limit)
        self._answers: dict[tuple[str, str, object], bytes] = {}
        self._generation = 0  # bumped (and answers dropped) whenever what an answer shows changes
        self._idempotent: dict[tuple[str, str], dict[str, object]] = {}
        self._accepted = 0
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._tcp: asyncio.AbstractServer | None = None
        self.port = 0

    # ---------------------------------------------------------------- seeding and inspection
    def add_token(self, token: str, org_id: str) -> None:
        """Accept ``token`` for ``org_id`` (or for any org when ``org_id`` is ANY_ORG)."""
        with self._lock:
            self._tokens[token] = org_id

    def add_agent(self, org_id: str, agent_id: str) -> None:
        with self._lock:
            self._agents[agent_id] = org_id
            self._changed()

    def add_memory(self, org_id: str, agent_id: str, content: str, **fields: object) -> str:
        """Store one memory (other fields as in StoredMemory) and return its id."""
        memory = StoredMemory(
            id=str(fields.pop("id", uuid.uuid4())), org_id=org_id, agent_id=agent_id,
            content=content, **fields,  # type: ignore[arg-type]
        )
        with self._lock:
            self._agents[agent_id] = org_id
            self._memories[memory.id] = memory
            self._changed()
        return memory.id

    def feedback_totals(self, memory_id: str) -> tuple[int, int]:
        """(positive, negative) feedback applied to the memory."""
        with self._lock:
            memory = self._memories[memory_id]
            return memory.positive, memory.negative

    def requests(self, endpoint: str | None = None) -> tuple[LoggedRequest, ...]:
        """The logged requests (the last ``log_limit``), oldest first, of one endpoint or all."""
        with self._lock:
            raw = [r for r in self._log if endpoint in (None, r.endpoint)]
        return tuple(LoggedRequest.of(r) for r in raw)

    def traceparents(self, endpoint: str | None = None) -> tuple[str, ...]:
        """The ``traceparent`` header of each logged request (oldest first; "" where none came)."""
        return tuple(r.traceparent for r in self.requests(endpoint))

    def clear_log(self) -> None:
        with self._lock:
            self._log.clear()

    @property
    def connections_accepted(self) -> int:
        with self._lock:
            return self._accepted

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # ---------------------------------------------------------------- HTTP handlers
    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v1/memories/hot", self._endpoint("hot", self._hot))
        app.router.add_post("/v1/memories/search", self._endpoint("search", self._search))
        app.router.add_post("/v1/memories/{memory_id}/feedback", self._endpoint("feedback", self._feedback))
        return app

    def _endpoint(self, name: str, produce: Producer) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handle(request: web.Request) -> web.StreamResponse:
            body = await request.read()
            plan = self._plan(name)
            self._record(name, request, body, plan.latency_s)
            if plan.faults.hold is not None:
                await plan.faults.hold.wait()
            if plan.latency_s:
                await asyncio.sleep(plan.latency_s)
            apply_first = plan.faults.reset_after_apply and name == "feedback"
            if plan.reset and not apply_first:
                return reset_connection(request)
            if plan.status is not None:
                return records.error(plan.status, "FORCED", f"forced status {plan.status}")
            org = self._authenticate(request)
            if isinstance(org, web.Response):
                return org
            if plan.faults.huge_body_bytes:
                return await huge_answer(request, plan.faults.huge_body_bytes, plan.faults.huge_body_declared)
            answer = produce(request, org, body)
            return reset_connection(request) if plan.reset else corrupt(answer, plan.faults, name)
        return handle

    def _record(self, name: str, request: web.Request, body: bytes, latency_s: float) -> None:
        entry = RawRequest(name, request.method, request.rel_url, request.headers, body, latency_s * 1000.0)
        with self._lock:
            self._log.append(entry)

    def _changed(self) -> None:
        """Call with the lock held after changing what answers show."""
        self._generation += 1
        self._answers.clear()

    def _kept(self, key: tuple[str, str, object], render: Callable[[], bytes | web.Response]) -> web.Response:
        """The good answer for ``key``, rendered once per state generation; errors are not kept."""
        with self._lock:
            body, generation = self._answers.get(key), self._generation
        if body is None:
            rendered = render()
            if isinstance(rendered, web.Response):
                return rendered
            body = rendered
            with self._lock:
                if generation == self._generation:  # nothing changed while rendering
                    if len(self._answers) >= _ANSWER_LIMIT:
                        self._answers.clear()
                    self._answers[key] = body
        return records.json_answer(body)

    def _authenticate(self, request: web.Request) -> str | web.Response:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        with self._lock:
            org = self._tokens.get(token) if scheme == "Bearer" else None
        if org is None:
            return records.error(401, "INVALID_TOKEN" if token else "MISSING_TOKEN", "Invalid or missing token")
        return org

    def _rows(self, org: str, agent_id: str, min_confidence: float) -> list[StoredMemory] | None:
        """The agent's memories at or above ``min_confidence``; None if the token may not read it."""
        with self._lock:
            owner = self._agents.get(agent_id)
            if owner is None or org not in (ANY_ORG, owner):
                return None
            return [m for m in self._memories.values()
                    if m.org_id == owner and m.agent_id == agent_id and m.confidence >= min_confidence]

    def _hot(self, request: web.Request, org: str, _body: bytes) -> web.Response:
        return self._kept(("hot", org, request.query_string), lambda: self._render_hot(request, org))

    def _search(self, _request: web.Request, org: str, body: bytes) -> web.Response:
        return self._kept(("search", org, body), lambda: self._render_search(org, body))

    def _render_hot(self, request: web.Request, org: str) -> bytes | web.Response:
        try:
            agent_id = request.query["agent_id"]
            limit = int(request.query.get("limit", "20"))
            min_confidence = float(request.query.get("min_confidence", "0.0"))
        except (KeyError, ValueError) as exc:
            return records.unprocessable(f"bad query parameter: {exc}")
        if not 1 <= limit <= 50 or not 0.0 <= min_confidence <= 1.0:
            return records.unprocessable("limit must be 1..50 and min_confidence 0..1")
        rows = self._rows(org, agent_id, min_confidence)
        if rows is None:
            return records.error(403, "AGENT_NOT_AUTHORIZED", "Agent not authorized")
        rows.sort(key=lambda m: (-m.hot_score, m.id))
        return records.results_body([(m, m.hot_score) for m in rows[:limit]], "hot_cache")

    def _render_search(self, org: str, body: bytes) -> bytes | web.Response:
        try:
            data = json.loads(body)
            agent_id, query = str(data["agent_id"]), data["query"]
            limit = int(data.get("limit", 10))
            min_similarity = float(data.get("min_similarity") or 0.0)
            min_confidence = float(data.get("min_confidence", 0.0))
            categories, tags = set(data.get("categories") or ()), set(data.get("tags") or ())
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            return records.unprocessable(f"bad search body: {exc!r}")
        if not isinstance(query, str) or not 1 <= len(query) <= 10000 or not 1 <= limit <= 100:
            return records.unprocessable("query must be 1..10000 characters and limit 1..100")
        rows = self._rows(org, agent_id, min_confidence)
        if rows is None:
            return records.error(403, "AGENT_NOT_AUTHORIZED", "Agent not authorized")
        scored = [(m, records.similarity(query, m.content)) for m in rows
                  if (not categories or m.category in categories) and (not tags or tags & set(m.tags))]
        scored = [(m, s) for m, s in scored if s > 0.0 and s >= min_similarity]
        scored.sort(key=lambda pair: (-pair[1], pair[0].id))
        return records.results_body(scored[:limit], "vector")

    def _feedback(self, request: web.Request, org: str, body: bytes) -> web.Response:
        memory_id = request.match_info["memory_id"]
        try:
            data = json.loads(body)
            value = data["feedback"]
        except (ValueError, KeyError, TypeError) as exc:
            return records.unprocessable(f"bad feedback body: {exc!r}")
        if value not in ("positive", "negative", "neutral") or len(data.get("notes") or "") > 2000:
            return records.unprocessable("feedback must be positive|negative|neutral and notes <= 2000 chars")
        key = request.headers.get("Idempotency-Key", "")
        with self._lock:
            memory = self._memories.get(memory_id)
            if memory is None or org not in (ANY_ORG, memory.org_id):
                return records.error(404, "MEMORY_NOT_FOUND", f"Memory {memory_id} not found")
            if key and (key, memory_id) in self._idempotent:
                return web.json_response({"data": self._idempotent[(key, memory_id)]})
            answer = records.apply_feedback(memory, value)
            self._changed()
            if key:
                self._idempotent[(key, memory_id)] = answer
        return web.json_response({"data": answer})

    # ---------------------------------------------------------------- lifecycle
    def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        """Serve in a background thread; returns once the port is bound."""
        ready = threading.Event()
        errors: list[BaseException] = []
        self._thread = threading.Thread(
            target=self._serve, args=(host, port, ready, errors), name="memory-server", daemon=True)
        self._thread.start()
        ready.wait(10.0)
        if errors or not self.port:
            raise RuntimeError(f"memory server did not start: {errors}")

    def stop(self) -> None:
        self.clear_faults()  # held requests end before the server does
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10.0)
            self._thread = None

    @classmethod
    @contextmanager
    def running(cls, *, seed: int = 0, port: int = 0) -> Iterator[MemoryServer]:
        """A started server on 127.0.0.1 (a free port unless given), stopped on exit."""
        server = cls(seed=seed)
        server.start(port=port)
        try:
            yield server
        finally:
            server.stop()

    def _serve(self, host: str, port: int, ready: threading.Event, errors: list[BaseException]) -> None:
        self._loop = self._loop_factory()
        try:
            self._loop.run_until_complete(self._open(host, port))
        except BaseException as exc:  # reported by start()
            errors.append(exc)
            ready.set()
            return
        ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._shutdown())
        self._loop.close()

    async def _open(self, host: str, port: int) -> None:
        self._runner = web.AppRunner(self._app(), access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        protocol_factory = self._runner.server

        def counting_factory() -> asyncio.Protocol:  # called once per accepted TCP connection
            with self._lock:
                self._accepted += 1
            return protocol_factory()

        self._tcp = await asyncio.get_running_loop().create_server(
            counting_factory, host, port, reuse_address=True, backlog=1024)
        self.port = self._tcp.sockets[0].getsockname()[1]

    async def _shutdown(self) -> None:
        if self._tcp is not None:
            self._tcp.close()
        if self._runner is not None:
            await self._runner.cleanup()
