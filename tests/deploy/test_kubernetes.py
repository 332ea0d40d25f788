"""The Kubernetes manifests: every overlay renders with kustomize, validates offline against the
Kubernetes 1.30 schemas (``kubernetes-validate --strict``), and the rendered objects say what
docs/DEPLOYMENT.md promises. Never skipped: kubectl and kubernetes-validate come with the dev extras.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from adapters.redis_directive_store import parse_sentinel_url
from entrypoints.auth.bind_guard import bind_guard
from entrypoints.grpc_api.server import LIVENESS_NAME, SERVICE_NAME
from entrypoints.settings import Settings
from tests.deploy.test_image import RUNTIME_UID, bin_tool

REPO = Path(__file__).resolve().parents[2]
KUBERNETES = REPO / "deploy" / "kubernetes"
OVERLAYS = ("demo", "production")
KUBERNETES_VERSION = "1.30.0"


def kustomize(overlay: str) -> str:
    result = subprocess.run([bin_tool("kubectl"), "kustomize", str(KUBERNETES / "overlays" / overlay)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture(scope="module", params=OVERLAYS)
def rendered(request: pytest.FixtureRequest) -> tuple[str, str]:
    return request.param, kustomize(request.param)


def objects(text: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in yaml.safe_load_all(text) if o}


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (main,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "ibex-context"]
    return main


def environment(main: dict[str, Any], secret_value: str = "from-a-secret") -> dict[str, str]:
    """The container's environment as the kubelet builds it: secretKeyRef values stand in, $(VAR) expanded."""
    env: dict[str, str] = {}
    for entry in main["env"]:
        value = entry["value"] if "value" in entry else secret_value
        env[entry["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), value)
    return env


def duration_s(text: str) -> float:
    return float(text[:-1]) if text.endswith("s") and not text.endswith("ms") else float(text.removesuffix("ms")) / 1000


def test_every_overlay_validates_strictly_against_kubernetes_1_30(rendered: tuple[str, str]) -> None:
    overlay, text = rendered
    result = subprocess.run([bin_tool("kubernetes-validate"), "--strict", "-k", KUBERNETES_VERSION, "-"],
                            input=text, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{overlay}:\n{result.stdout}\n{result.stderr}"
    assert "passed" in result.stdout + result.stderr


def test_the_objects_each_overlay_renders(rendered: tuple[str, str]) -> None:
    overlay, text = rendered
    kinds = {kind for kind, _ in objects(text)}
    expected = {"Deployment", "Service", "PodDisruptionBudget", "NetworkPolicy", "ServiceAccount"}
    assert expected <= kinds
    assert ("HorizontalPodAutoscaler" in kinds) == (overlay == "production")
    assert "Secret" not in kinds  # secrets are created out of band, never kept in the repository
    namespaces = {o["metadata"].get("namespace") for o in objects(text).values()}
    assert namespaces == {"ibex-context-demo" if overlay == "demo" else "ibex-context"}


def test_probes_are_native_grpc_on_the_numeric_health_port(rendered: tuple[str, str]) -> None:
    _, text = rendered
    main = container(objects(text)[("Deployment", "ibex-context")])
    ports = {p["name"]: p["containerPort"] for p in main["ports"]}
    env = environment(main)
    health_port = int(env["IBEX_CONTEXT_HEALTH_ADDR"].rsplit(":", 1)[1])
    assert ports["health"] == health_port == 9094 and ports["grpc"] == 9092 and ports["http"] == 9093
    services = {}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        grpc_probe = main[probe]["grpc"]
        assert set(main[probe]) - {"grpc"} <= {"periodSeconds", "timeoutSeconds", "failureThreshold",
                                                "successThreshold", "initialDelaySeconds"}
        assert isinstance(grpc_probe["port"], int) and grpc_probe["port"] == health_port
        services[probe] = grpc_probe.get("service", "")
    assert services == {"startupProbe": "", "readinessProbe": SERVICE_NAME, "livenessProbe": LIVENESS_NAME}
    # a liveness probe must tolerate a whole drain before it could restart the pod
    live = main["livenessProbe"]
    drain_and_grace = duration_s(env["IBEX_CONTEXT_DRAIN_DELAY"]) + duration_s(env["IBEX_CONTEXT_SHUTDOWN_GRACE"])
    assert live["periodSeconds"] * live["failureThreshold"] >= drain_and_grace


def test_the_security_context_locks_the_pod_down(rendered: tuple[str, str]) -> None:
    _, text = rendered
    pod = objects(text)[("Deployment", "ibex-context")]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == RUNTIME_UID
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False and pod["enableServiceLinks"] is False
    for each in pod["containers"] + pod.get("initContainers", []):
        context = each["securityContext"]
        assert context["runAsNonRoot"] is True and context["readOnlyRootFilesystem"] is True
        assert context["allowPrivilegeEscalation"] is False and context["capabilities"] == {"drop": ["ALL"]}
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}
        mounts = {m["mountPath"] for m in each["volumeMounts"]}
        assert {"/tmp", "/var/lib/ibex-context"} <= mounts  # the only writable paths the image documents


def test_termination_grace_exceeds_drain_plus_grace(rendered: tuple[str, str]) -> None:
    _, text = rendered
    deployment = objects(text)[("Deployment", "ibex-context")]
    env = environment(container(deployment))
    drain, grace = duration_s(env["IBEX_CONTEXT_DRAIN_DELAY"]), duration_s(env["IBEX_CONTEXT_SHUTDOWN_GRACE"])
    assert drain > 0 and grace > 0
    assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > drain + grace + 5
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_resources_and_topology_spread(rendered: tuple[str, str]) -> None:
    _, text = rendered
    pod = objects(text)[("Deployment", "ibex-context")]["spec"]["template"]["spec"]
    resources = container({"spec": {"template": {"spec": pod}}})["resources"]
    assert resources["requests"]["cpu"] in ("1000m", "500m") and "cpu" not in resources["limits"]
    assert resources["requests"]["memory"] == "320Mi" and resources["limits"]["memory"] == "640Mi"
    keys = {c["topologyKey"] for c in pod["topologySpreadConstraints"]}
    assert keys == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}
    for constraint in pod["topologySpreadConstraints"]:
        assert constraint["labelSelector"]["matchLabels"] == {"app.kubernetes.io/name": "ibex-context"}


def test_the_service_starts_with_this_environment_and_authentication(rendered: tuple[str, str]) -> None:
    overlay, text = rendered
    env = environment(container(objects(text)[("Deployment", "ibex-context")]))
    settings = Settings.from_env(env)  # every variable parses, and the cross-field rules hold
    assert settings.has_auth and not settings.allow_insecure_bind
    for address in (settings.grpc_addr, settings.http_addr):
        assert address.startswith("0.0.0.0:")
        assert bind_guard(address, settings.has_auth, settings.allow_insecure_bind) is None
    assert settings.principal_keys == "/etc/ibex-context/principal/keys.json"
    assert settings.max_connection_age_ms > 0 and settings.drain_delay_ms > 0
    if overlay == "demo":
        assert settings.uses_embedded_directives and settings.uses_embedded_memory
        assert not settings.tls_client_ca
    else:
        assert settings.tls_client_ca and settings.tls_cert and settings.tls_key  # mTLS
        target = parse_sentinel_url(settings.redis_url)
        assert len(target.sentinels) == 3 and target.service_name == "mymaster" and target.db == 0
        assert target.password == target.sentinel_password == "from-a-secret"
        assert settings.memory_base_url.startswith("http") and settings.memory_api_token == "from-a-secret"


def test_secrets_are_mounted_for_every_file_the_settings_name(rendered: tuple[str, str]) -> None:
    _, text = rendered
    deployment = objects(text)[("Deployment", "ibex-context")]
    pod = deployment["spec"]["template"]["spec"]
    main = container(deployment)
    env = environment(main)
    secret_volumes = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    mounts = {m["mountPath"]: m["name"] for m in main["volumeMounts"]}
    for variable in ("IBEX_CONTEXT_PRINCIPAL_KEYS", "IBEX_CONTEXT_TLS_CERT", "IBEX_CONTEXT_TLS_KEY",
                     "IBEX_CONTEXT_TLS_CLIENT_CA"):
        if variable in env:
            directory = str(Path(env[variable]).parent)
            assert directory in mounts and mounts[directory] in secret_volumes, variable
    assert set(secret_volumes.values()) <= {"ibex-context-principal-keys", "ibex-context-tls"}


def test_headless_service_for_grpc_and_cluster_ip_for_http(rendered: tuple[str, str]) -> None:
    _, text = rendered
    found = objects(text)
    grpc_service = found[("Service", "ibex-context-grpc")]["spec"]
    assert grpc_service["clusterIP"] == "None"
    assert [(p["name"], p["port"], p["targetPort"]) for p in grpc_service["ports"]] == [("grpc", 9092, "grpc")]
    assert grpc_service.get("publishNotReadyAddresses", False) is False
    http_service = found[("Service", "ibex-context")]
    assert http_service["spec"]["type"] == "ClusterIP" and "clusterIP" not in http_service["spec"]
    assert [(p["name"], p["port"]) for p in http_service["spec"]["ports"]] == [("http", 9093)]
    assert http_service["metadata"]["annotations"]["prometheus.io/path"] == "/metrics"
    selector = {"app.kubernetes.io/name": "ibex-context"}
    assert grpc_service["selector"] == http_service["spec"]["selector"] == selector


def test_disruption_budget_autoscaler_and_network_policy(rendered: tuple[str, str]) -> None:
    overlay, text = rendered
    found = objects(text)
    pdb = found[("PodDisruptionBudget", "ibex-context")]["spec"]
    assert pdb["maxUnavailable"] == 1 and pdb["selector"]["matchLabels"] == {"app.kubernetes.io/name": "ibex-context"}
    deployment = found[("Deployment", "ibex-context")]["spec"]
    if overlay == "production":
        hpa = found[("HorizontalPodAutoscaler", "ibex-context")]["spec"]
        assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "ibex-context"}
        assert (hpa["minReplicas"], hpa["maxReplicas"]) == (3, 20)
        (metric,) = hpa["metrics"]
        assert metric["resource"]["name"] == "cpu" and metric["resource"]["target"]["type"] == "Utilization"
        assert "replicas" not in deployment  # the autoscaler owns the count
    else:
        assert deployment["replicas"] == 1
        (init,) = deployment["template"]["spec"]["initContainers"]
        assert init["command"] == ["ibex-context", "demo", "load"] and init["image"] == container(
            {"spec": deployment})["image"]
    policy = found[("NetworkPolicy", "ibex-context")]["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    ingress_ports = {p["port"] for rule in policy["ingress"] for p in rule["ports"]}
    assert ingress_ports == {9092, 9093, 9094}
    egress_ports = {p["port"] for rule in policy["egress"] for p in rule["ports"]}
    assert egress_ports == ({53} if overlay == "demo" else {53, 26379, 6379, 8080})
