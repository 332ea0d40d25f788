"""The layering is a promise to architects: lint-imports must pass, and its contracts must bite."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("domain", "ports", "adapters", "entrypoints", "contracts", "conformance")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def run_lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(root / ".importlinter")],
        cwd=root, env=env, capture_output=True, text=True, timeout=120,
    )


def test_all_contracts_are_kept() -> None:
    result = run_lint_imports(REPO_ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def copy_tree(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    for package in PACKAGES:
        shutil.copytree(REPO_ROOT / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO_ROOT / ".importlinter", root / ".importlinter")
    return root


@pytest.mark.parametrize(("module", "source", "contract"), [
    ("domain/model/planted.py", "import redis\n", "Domain and ports import no transport"),
    ("domain/usecases/planted.py", "from opentelemetry import trace\n", "Domain and ports import no transport"),
    ("domain/model/planted.py", "import adapters.system_clock\n", "Hexagon: dependencies point inward"),
    ("ports/planted.py", "import numpy\n", "Ports import only the domain model"),
    ("domain/layout_planted.py", "import time\n", "read no clock, env, filesystem"),
    ("adapters/planted.py", "import adapters.system_clock\nimport adapters.secrets_nonce_source\n", "Adapters are independent"),
    ("adapters/planted_di.py", "import dependency_injector\n", "Only entrypoints.containers and entrypoints.cli import dependency_injector"),
    ("entrypoints/settings_planted.py", "from contracts.ibex.context.v1 import context_pb2\n", "Only the edges, their translation, auth and the CLI import protobuf code"),
    ("adapters/planted_proto.py", "from contracts.ibex.context.v1 import context_pb2\n", "Only the edges, their translation, auth and the CLI import protobuf code"),
    ("entrypoints/translation.py", "import entrypoints.http_api.app\n", "Entrypoints: cli runs"),
    ("entrypoints/grpc_api/planted.py", "import entrypoints.containers\n", "Entrypoints: cli runs"),
])
def test_a_planted_violation_is_reported(tmp_path: Path, module: str, source: str, contract: str) -> None:
    root = copy_tree(tmp_path)
    (root / module).write_text(f'"""Planted violation."""\n{source}')
    result = run_lint_imports(root)
    assert result.returncode != 0
    broken = [line for line in result.stdout.splitlines() if line.endswith("BROKEN")]
    assert any(contract in line for line in broken), result.stdout
