"""docs/DEPLOYMENT.md and what the code and the loopback proof use agree."""

from __future__ import annotations

import json
import re
from pathlib import Path

from bench.scaleout import SERVICE_CONFIG_PATH, client_options
from entrypoints.grpc_api.server import SERVER_OPTIONS, SERVICE_NAME

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "DEPLOYMENT.md").read_text()


def test_the_documented_service_config_is_the_file_the_proof_loads() -> None:
    blocks = [json.loads(block) for block in re.findall(r"```json\n(.*?)```", DOC, re.S)]
    config = json.loads(SERVICE_CONFIG_PATH.read_text())
    assert config in blocks
    assert config["loadBalancingConfig"] == [{"round_robin": {}}]
    assert config["healthCheckConfig"] == {"serviceName": SERVICE_NAME}
    (method,) = config["methodConfig"]
    assert method["name"] == [{"service": SERVICE_NAME}]
    assert method["retryPolicy"]["retryableStatusCodes"] == ["UNAVAILABLE"]


def test_client_keepalive_respects_the_server_enforcement() -> None:
    client, server = dict(client_options("{}")), dict(SERVER_OPTIONS)
    assert client["grpc.keepalive_time_ms"] >= server["grpc.http2.min_ping_interval_without_data_ms"]
    assert client["grpc.keepalive_permit_without_calls"] == server["grpc.keepalive_permit_without_calls"] == 1
    assert "Time:                30 * time.Second" in DOC and "PermitWithoutStream: true" in DOC
    assert "dns.SetMinResolutionInterval(time.Second)" in DOC
    assert client["grpc.dns_min_time_between_resolutions_ms"] == 1000
    assert 'import _ "google.golang.org/grpc/health"' in DOC
    assert "dns:///ibex-context-grpc.ibex-context.svc.cluster.local:9092" in DOC
