"""``ibex-context serve`` as a real subprocess on free ports with the embedded backend."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import attrs
import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from contracts.ibex.context.v1 import context_pb2 as pb
from contracts.ibex.context.v1 import context_pb2_grpc as pb_grpc
from entrypoints.grpc_api.server import SERVICE_NAME
from tests.e2e.tenant import AGENT_ID, MODEL, ORG_ID

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60.0


@attrs.define
class ServeProcess:
    process: subprocess.Popen
    grpc_target: str = ""
    http_url: str = ""
    event_loop: str = ""

    def stop(self, sig: int) -> int:
        self.process.send_signal(sig)
        return self.process.wait(timeout=20)


def serve_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IBEX_CONTEXT_")}
    env.update({
        "IBEX_CONTEXT_GRPC_ADDR": "127.0.0.1:0",
        "IBEX_CONTEXT_HTTP_ADDR": "127.0.0.1:0",
        "IBEX_CONTEXT_DATA_PATH": str(tmp_path / "ibex.db"),
        **extra,
    })
    return env


def launch(env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "entrypoints.cli", "serve"], cwd=REPO, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


@contextmanager
def serving(env: dict[str, str], event_loop: str = "") -> Iterator[ServeProcess]:
    """``serve`` started with ``env``, once it has announced both listeners; killed if still running."""
    served = ServeProcess(launch(env), event_loop=event_loop)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (served.grpc_target and served.http_url):
            assert time.monotonic() < deadline, "serve did not announce its listeners"
            line = served.process.stdout.readline()  # type: ignore[union-attr]
            assert line, f"serve exited early: {served.process.wait()} {served.process.stderr.read()}"  # type: ignore[union-attr]
            if line.startswith("ibex-context: gRPC listening on "):
                served.grpc_target = line.rsplit(" ", 1)[1].strip()
            elif line.startswith("ibex-context: HTTP listening on "):
                served.http_url = line.rsplit(" ", 1)[1].strip()
        yield served
    finally:
        if served.process.poll() is None:
            served.process.kill()
            served.process.wait()
        for stream in (served.process.stdout, served.process.stderr):
            stream.close()  # type: ignore[union-attr]


@pytest.fixture(params=["uvloop", "asyncio"])
def served(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ServeProcess]:
    with serving(serve_env(tmp_path, IBEX_CONTEXT_EVENT_LOOP=request.param), request.param) as served:
        yield served


def run_to_exit(env: dict[str, str]) -> tuple[int, str]:
    result = subprocess.run([sys.executable, "-m", "entrypoints.cli", "serve"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=60)
    return result.returncode, result.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_serve_announces_answers_and_exits_cleanly_on_a_signal(served: ServeProcess, sig: int) -> None:
    with grpc.insecure_channel(served.grpc_target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for name in ("", SERVICE_NAME):
            assert health.Check(health_pb2.HealthCheckRequest(service=name), timeout=10).status == health_pb2.HealthCheckResponse.SERVING
        request = pb.AssembleContextRequest(org_id=ORG_ID, agent_id=AGENT_ID, model=MODEL, query="theme",
                                            recent_messages=[pb.Message(role="user", content="hello there")])
        response = pb_grpc.ContextAssemblyServiceStub(channel).AssembleContext(request, timeout=10)
    assert response.degradation_level == "L0"
    assert "hello there" in response.assembled_context
    assert httpx.get(f"{served.http_url}/healthz", timeout=10).json() == {"status": "ok"}

    assert served.stop(sig) == 0
    stderr = served.process.stderr.read()  # type: ignore[union-attr]
    assert '"service_stopped"' in stderr
    assert f'"event_loop": "{served.event_loop}"' in stderr
    assert "Traceback" not in stderr


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from (key, *_strings(item))
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def test_every_log_line_is_plain_json_and_carries_the_answered_request_id(tmp_path: Path) -> None:
    with serving(serve_env(tmp_path, IBEX_CONTEXT_LOG_LEVEL="DEBUG")) as served:
        request = pb.AssembleContextRequest(org_id=ORG_ID, agent_id=AGENT_ID, model=MODEL)
        with grpc.insecure_channel(served.grpc_target) as channel:
            grpc_id = pb_grpc.ContextAssemblyServiceStub(channel).AssembleContext(request, timeout=10).request_id
        body = {"orgId": ORG_ID, "agentId": AGENT_ID, "model": MODEL}
        http_id = httpx.post(f"{served.http_url}/v1/context:assemble", json=body, timeout=10).json()["requestId"]
        assert served.stop(signal.SIGTERM) == 0
        stderr = served.process.stderr.read()  # type: ignore[union-attr]

    entries = [json.loads(line) for line in stderr.splitlines()]  # every line is one JSON object
    assert any(e["logger"] == "uvicorn.error" and e["event"].startswith("Started server process") for e in entries)
    assert all("color_message" not in e for e in entries)
    assert not [text for e in entries for text in _strings(e) if "\x1b" in text or "\x9b" in text]
    assert "\\u001b" not in stderr
    by_event = {e["event"]: e for e in entries if e["event"] in ("grpc_request", "http_request")}
    for generated in (grpc_id, http_id):
        assert str(uuid.UUID(generated)) == generated and uuid.UUID(generated).version == 4
    assert (by_event["grpc_request"]["request_id"], by_event["http_request"]["request_id"]) == (grpc_id, http_id)


@pytest.mark.parametrize("variable, value", [("IBEX_CONTEXT_DEADLINE_MS", "soon"), ("IBEX_CONTEXT_EVENT_LOOP", "trio")])
def test_a_bad_variable_exits_2_with_one_line_naming_it(tmp_path: Path, variable: str, value: str) -> None:
    code, stderr = run_to_exit(serve_env(tmp_path, **{variable: value}))
    assert code == 2
    assert stderr.count("\n") == 1 and variable in stderr and value in stderr


@pytest.mark.parametrize("shared", [False, True], ids=["plain", "so_reuseport"])
def test_a_port_in_use_exits_2_with_one_line(tmp_path: Path, shared: bool) -> None:
    """Even a port held with SO_REUSEPORT (as another grpc server holds it by default) is refused:
    one serve process per port, replicas for more."""
    with socket.socket() as taken:
        if shared:
            taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        code, stderr = run_to_exit(serve_env(tmp_path, IBEX_CONTEXT_GRPC_ADDR=f"127.0.0.1:{port}"))
    lines = stderr.splitlines()
    assert code == 2
    assert len(lines) == 1 and f"127.0.0.1:{port}" in lines[0] and "cannot bind" in lines[0]


def test_a_non_loopback_bind_without_auth_exits_2(tmp_path: Path) -> None:
    code, stderr = run_to_exit(serve_env(tmp_path, IBEX_CONTEXT_HTTP_ADDR="0.0.0.0:0"))
    lines = stderr.splitlines()
    assert code == 2
    assert len(lines) == 1 and "HTTP" in lines[0] and "IBEX_CONTEXT_ALLOW_INSECURE_BIND" in lines[0]
    assert not (tmp_path / "ibex.db").exists()  # refused before anything was opened
