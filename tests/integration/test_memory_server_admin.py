"""The memory stand-in's runtime control channel (process.py) and the switches it drives.

A real stand-in process on loopback, flipped through its admin endpoint while it serves: every
assertion is on what a plain HTTP client then receives (statuses, bodies, lengths), or a lower
bound on a latency, so nothing depends on how fast the machine is.
"""

from __future__ import annotations

import http.client
import json
import random
import time
import urllib.parse
from collections.abc import Iterator

import pytest

from tests.support.memory_server import MALFORMED_BODIES, MemoryServer, MemoryServerProcess
from tests.support.memory_server.process import ADMIN_OPERATIONS

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stand_in() -> Iterator[MemoryServerProcess]:
    process = MemoryServerProcess.launch("--seed-demo", "5", "--cold-latency-ms", "60")
    try:
        yield process
    finally:
        process.close()


@pytest.fixture
def memory(stand_in: MemoryServerProcess) -> MemoryServerProcess:
    stand_in.fault("clear_faults")
    return stand_in


def request(memory: MemoryServerProcess, endpoint: str = "hot") -> tuple[int, dict[str, str], bytes]:
    """One request on a fresh connection: (status, headers lower-cased, body)."""
    url = urllib.parse.urlsplit(memory.base_url)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    headers = {"Authorization": f"Bearer {memory.token}", "Content-Type": "application/json"}
    try:
        if endpoint == "hot":
            connection.request("GET", f"/v1/memories/hot?agent_id={memory.agent_id}&limit=5", headers=headers)
        else:
            body = json.dumps({"agent_id": memory.agent_id, "query": "memory", "limit": 5})
            connection.request("POST", "/v1/memories/search", body=body, headers=headers)
        answer = connection.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        connection.close()


def test_the_startup_line_names_a_loopback_admin_url(memory: MemoryServerProcess) -> None:
    url = urllib.parse.urlsplit(memory.admin_url)
    assert url.scheme == "http" and url.hostname == "127.0.0.1" and url.port
    assert url.port != urllib.parse.urlsplit(memory.base_url).port


def test_flapping_answers_the_seeded_sequence_on_each_endpoint(memory: MemoryServerProcess) -> None:
    # the process's MemoryServer has seed 0; each endpoint draws from a generator of its own
    generator = random.Random("0/hot/status")
    expected_hot = [503 if generator.random() < 0.5 else 200 for _ in range(24)]
    assert 0 < expected_hot.count(503) < 24
    memory.fault("force_status", endpoint="hot", status=503, ratio=0.5)
    memory.fault("force_status", endpoint="search", status=502, ratio=0.5)
    seen = []
    for _ in range(24):
        seen.append(request(memory, "hot")[0])
        request(memory, "search")  # interleaved: draws of its own, the hot sequence is unchanged
    assert seen == expected_hot
    memory.fault("force_status", endpoint="hot", status=503, ratio=0.5)  # set again: the same sequence again
    assert [request(memory, "hot")[0] for _ in range(24)] == expected_hot


def test_a_forced_status_of_every_answer_and_clear(memory: MemoryServerProcess) -> None:
    memory.fault("force_status", endpoint="hot", status=403)
    status, _, body = request(memory)
    assert status == 403 and json.loads(body)["detail"]["code"] == "FORCED"
    memory.fault("clear_faults")
    status, _, body = request(memory)
    assert status == 200 and len(json.loads(body)["data"]["results"]) == 5


def test_malformed_bodies(memory: MemoryServerProcess) -> None:
    memory.fault("malform_body", endpoint="search", kind="truncated")
    status, _, body = request(memory, "search")
    assert (status, body) == (200, MALFORMED_BODIES["truncated"])
    assert request(memory, "hot")[0] == 200  # the other endpoint is untouched


@pytest.mark.parametrize("declared", [True, False])
def test_a_huge_body_is_valid_json_of_exactly_the_size_asked(memory: MemoryServerProcess, declared: bool) -> None:
    size = 3 * 256 * 1024 + 17  # several chunks and a partial one
    memory.fault("huge_body", endpoint="hot", size_bytes=size, declared=declared)
    status, headers, body = request(memory)
    assert status == 200 and len(body) == size
    assert json.loads(body)["data"]["results"] == []
    if declared:
        assert headers["content-length"] == str(size)
    else:
        assert headers.get("transfer-encoding") == "chunked" and "content-length" not in headers


def test_connection_resets(memory: MemoryServerProcess) -> None:
    memory.fault("reset_connections", endpoint="hot")
    with pytest.raises((ConnectionError, http.client.RemoteDisconnected)):
        request(memory)
    assert request(memory, "search")[0] == 200


def test_latency_and_clear_keeps_the_command_line_latency(memory: MemoryServerProcess) -> None:
    memory.fault("set_latency", endpoint="hot", ms=150)
    started = time.monotonic()
    assert request(memory)[0] == 200
    assert time.monotonic() - started >= 0.15
    memory.fault("clear_faults")
    started = time.monotonic()
    assert request(memory, "search")[0] == 200
    assert time.monotonic() - started >= 0.06  # --cold-latency-ms 60 survives clear_faults


def test_refused_operations_and_arguments_name_the_problem(memory: MemoryServerProcess) -> None:
    with pytest.raises(ValueError, match="unknown endpoint 'nope'"):
        memory.fault("set_latency", endpoint="nope", ms=1)
    with pytest.raises(ValueError, match="ratio must be a number in"):
        memory.fault("force_status", endpoint="hot", status=503, ratio=0)
    with pytest.raises(ValueError, match="unexpected keyword argument"):
        memory.fault("set_latency", endpoint="hot", millis=1)
    with pytest.raises(ValueError, match="POST /faults/<operation>"):
        memory.fault("hold", endpoint="hot")  # not offered: it would need a blocking wait_held
    assert "hold" not in ADMIN_OPERATIONS
    assert request(memory)[0] == 200  # nothing was applied


def test_stats_count_connections(memory: MemoryServerProcess) -> None:
    before = memory.stats()["connections_accepted"]
    request(memory)
    request(memory)
    assert memory.stats()["connections_accepted"] == before + 2


def test_ratio_switches_in_process_are_deterministic_and_count_only_what_they_apply() -> None:
    server = MemoryServer(seed=3)
    server.reset_connections("search", ratio=0.25, times=3)
    generator = random.Random("3/search/reset")
    expected = [generator.random() < 0.25 for _ in range(200)]
    cut = [i for i, hit in enumerate(expected) if hit][2] + 1  # the third reset is the last one
    planned = [server._plan("search").reset for _ in range(200)]
    assert planned == expected[:cut] + [False] * (200 - cut)
    assert [server._plan("hot").reset for _ in range(5)] == [False] * 5
