"""``ibex-context memory|directive|demo`` through real subprocess runs on a temporary data file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ORG = "3d4c5b6a-7980-4a1b-9c2d-3e4f5a6b7c8d"
AGENT = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"
TENANT = ["--org-id", ORG, "--agent-id", AGENT]


@pytest.fixture
def cli(tmp_path: Path):  # type: ignore[no-untyped-def]
    env = {**os.environ, "IBEX_CONTEXT_DATA_PATH": str(tmp_path / "data" / "ibex.db")}
    env.pop("IBEX_CONTEXT_MEMORY_BASE_URL", None)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "entrypoints.cli", *args], env=env, capture_output=True, text=True, timeout=120)

    return run


def test_memory_add_list_delete_round_trip(cli) -> None:  # type: ignore[no-untyped-def]
    added = cli("memory", "add", *TENANT, "--content", "Prefers dark mode", "--category", "preference", "--tag", "ui")
    assert added.returncode == 0, added.stderr
    memory_id = added.stdout.strip()
    listed = [json.loads(line) for line in cli("memory", "list", *TENANT).stdout.splitlines()]
    assert [(m["memory_id"], m["content"], m["tags"]) for m in listed] == [(memory_id, "Prefers dark mode", ["ui"])]
    assert cli("memory", "delete", *TENANT, "--memory-id", memory_id).returncode == 0
    missing = cli("memory", "delete", *TENANT, "--memory-id", memory_id)
    assert missing.returncode == 2 and "no memory" in missing.stderr
    assert cli("memory", "list", *TENANT).stdout == ""


def test_import_is_all_or_nothing_and_names_the_bad_line(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    good = {"org_id": ORG, "agent_id": AGENT, "content": "fact one", "category": "factual"}
    path = tmp_path / "memories.jsonl"
    path.write_text("\n".join([json.dumps(good), json.dumps({**good, "confidence": 1.5}), json.dumps(good)]) + "\n")
    failed = cli("memory", "import", str(path))
    assert failed.returncode == 2
    assert "line 2" in failed.stderr and "confidence" in failed.stderr
    assert len(failed.stderr.strip().splitlines()) == 1
    assert cli("memory", "list", *TENANT).stdout == ""
    path.write_text("\n".join(json.dumps({**good, "content": f"fact {i}"}) for i in range(40)) + "\n")
    imported = cli("memory", "import", str(path))
    assert imported.returncode == 0 and "imported 40 memories" in imported.stdout
    assert "40/40 (100%)" in imported.stderr
    assert len(cli("memory", "list", *TENANT, "--limit", "100").stdout.splitlines()) == 40


def test_directive_set_and_get(cli) -> None:  # type: ignore[no-untyped-def]
    assert cli("directive", "get", *TENANT).returncode == 2
    version = cli("directive", "set", *TENANT, "--content", "Be precise.", "--injection-mode", "system_append")
    assert version.returncode == 0
    shown = json.loads(cli("directive", "get", *TENANT).stdout)
    assert shown == {"content": "Be precise.", "injection_mode": "system_append", "version_id": version.stdout.strip()}
    bad = cli("directive", "set", *TENANT, "--content", "x", "--injection-mode", "sideways")
    assert bad.returncode == 2 and "injection_mode" in bad.stderr


def test_bad_input_exits_2_with_one_line(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("memory", "add", "--org-id", "nope", "--agent-id", AGENT, "--content", "c", "--category", "factual")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "org_id" in result.stderr
    missing = cli("memory", "import", "/no/such/file.jsonl")
    assert missing.returncode == 2 and "no such file" in missing.stderr


def test_demo_load_is_idempotent(cli) -> None:  # type: ignore[no-untyped-def]
    first = cli("demo", "load")
    assert first.returncode == 0 and "loaded" in first.stdout
    again = cli("demo", "load")
    assert again.returncode == 0 and "already loaded" in again.stdout
