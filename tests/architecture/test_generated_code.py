"""The committed stubs are exactly what the .proto files generate."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_committed_stubs_match_the_protos() -> None:
    result = subprocess.run([sys.executable, "-m", "contracts.generate", "--check"], cwd=REPO_ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_a_changed_field_number_is_detected(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    shutil.copytree(REPO_ROOT / "contracts", root / "contracts", ignore=shutil.ignore_patterns("__pycache__"))
    proto = root / "contracts/ibex/context/v1/context.proto"
    proto.write_text(proto.read_text().replace("string query = 4;", "string query = 40;"))
    result = subprocess.run([sys.executable, "-m", "contracts.generate", "--check"], cwd=root, capture_output=True, text=True)
    assert result.returncode == 1
    assert "contracts/ibex/context/v1/context_pb2.py" in result.stderr
