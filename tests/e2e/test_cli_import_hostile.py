"""``ibex-context memory import`` fed hostile lines: exit 2 naming the file, line and field, nothing stored.

The named cases run the real CLI as a subprocess (the style of ``test_cli_data.py``); the property
test runs ``entrypoints.cli.main`` in-process (a subprocess per example would take minutes) on a
fresh data file per example: a traceback there is an exception escaping ``main``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from entrypoints.cli import main

pytestmark = pytest.mark.e2e

ORG = "3d4c5b6a-7980-4a1b-9c2d-3e4f5a6b7c8d"
AGENT = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"
GOOD = {"org_id": ORG, "agent_id": AGENT, "content": "fact one", "category": "factual"}


@pytest.fixture
def cli(tmp_path: Path):  # type: ignore[no-untyped-def]
    env = {**os.environ, "IBEX_CONTEXT_DATA_PATH": str(tmp_path / "data" / "ibex.db")}
    env.pop("IBEX_CONTEXT_MEMORY_BASE_URL", None)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "entrypoints.cli", *args], env=env, capture_output=True,
                              text=True, timeout=120)

    return run


def _line(**fields: object) -> str:
    return json.dumps({**GOOD, **fields})


def _raw(prefix: str, value: str) -> str:
    """A line whose last field is ``value`` as written (JSON text json.dumps cannot produce)."""
    return json.dumps(GOOD)[:-1] + f', "{prefix}": {value}}}'


HOSTILE = [
    ("deep-value", _raw("confidence", "[" * 5000 + "]" * 5000), "confidence", "nested deeper than 16 levels"),
    ("deep-line", "[" * 100_000, "line", "nested deeper than 16 levels"),
    ("count-2^63", _line(retrieval_count=2**63), "retrieval_count", "must be an integer in [0, 9223372036854775807]"),
    ("count-huge", _raw("retrieval_count", "9" * 5000), "retrieval_count", "an integer of 5000 digits"),
    ("year-1-east", _line(created_at="0001-01-01T00:00:00+01:00"), "created_at", "outside 0001-01-01..9999-12-31"),
    ("year-9999-west", _line(created_at="9999-12-31T23:59:59-01:00"), "created_at", "outside 0001-01-01..9999-12-31"),
    ("confidence-400-digits", _raw("confidence", "1" + "0" * 400), "confidence", "an integer of 401 digits"),
    ("confidence-5000-digits", _raw("confidence", "1" * 5000), "confidence", "an integer of 5000 digits"),
    ("usefulness-huge-float", _raw("usefulness", "1" + "0" * 400 + ".5"), "usefulness", "got inf"),
    ("tags-object", _line(tags={"k": 1}), "tags", "must be a list of strings, got dict"),
    ("tags-string", _line(tags="ui"), "tags", "must be a list of strings, got str"),
    ("tags-too-many", _line(tags=[f"t{i}" for i in range(100_000)]), "tags", "more than 64 distinct tags"),
    ("surrogate-key", _raw("\\ud800x", "1"), "'\\ud800x'", "unknown field"),
    ("surrogate-content", _line(content="a\ud800b"), "content", "lone surrogate"),
    ("over-1-MiB", _line(content="x" * (1024 * 1024)), "line", "the maximum is 1048576"),
]


@pytest.mark.parametrize(("bad", "field", "problem"), [case[1:] for case in HOSTILE], ids=[case[0] for case in HOSTILE])
def test_a_hostile_line_exits_2_naming_file_line_and_field(cli, tmp_path: Path, bad: str, field: str,  # type: ignore[no-untyped-def]
                                                           problem: str) -> None:
    path = tmp_path / "memories.jsonl"
    path.write_text("\n".join([_line(content="fact zero"), bad, _line(content="fact two")]) + "\n")
    result = cli("memory", "import", str(path))
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr[-2000:]
    assert result.stderr.startswith(f"ibex-context: {path}: line 2: {field}: "), result.stderr[:300]
    assert problem in result.stderr
    assert len(result.stderr) < 600  # the value is described, never echoed whole
    assert cli("memory", "list", "--org-id", ORG, "--agent-id", AGENT).stdout == ""


def test_a_duplicate_id_in_the_file_is_named_before_anything_is_written(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    memory_id = str(uuid.uuid4())
    path = tmp_path / "memories.jsonl"
    path.write_text("\n".join([_line(memory_id=memory_id), _line(), _line(memory_id=memory_id.upper())]) + "\n")
    result = cli("memory", "import", str(path))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith(f"ibex-context: {path}: line 3: memory_id: a memory with id {memory_id} already exists on line 1")


def test_the_extreme_valid_values_import(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "memories.jsonl"
    path.write_text("\n".join([
        _line(content="first", created_at="0001-01-01T00:00:00Z", retrieval_count=2**63 - 1, confidence=1),
        _line(content="last", created_at="9999-12-31T23:59:59.999999+00:00", confidence=0, usefulness=0.0,
              tags=["a"] * 1000 + [f"t{i}" for i in range(63)]),
        _raw("confidence", "1" + "0" * 400 + "e-400"),
    ]) + "\n")
    result = cli("memory", "import", str(path))
    assert result.returncode == 0, result.stderr
    listed = {m["content"]: m for m in map(json.loads, cli("memory", "list", "--org-id", ORG, "--agent-id", AGENT).stdout.splitlines())}
    assert listed["first"]["retrieval_count"] == 2**63 - 1 and listed["first"]["created_at"].startswith("0001-01-01")
    assert listed["last"]["created_at"].startswith("9999-12-31") and len(listed["last"]["tags"]) == 64


# ---------------------------------------------------------------------------------------------
# Property: any file of JSON lines, valid or mangled, is imported whole (exit 0) or refused whole
# (exit 2, one line naming the file, the line and a field), never a traceback.

_JSON_SCALARS = (st.none() | st.booleans() | st.floats() | st.text(max_size=20)
                 | st.integers() | st.sampled_from([2**63, -(2**63) - 1, 10**400, 1, 0, -1]))
_ANY_JSON = st.recursive(_JSON_SCALARS, lambda inner: st.lists(inner, max_size=4)
                         | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
_TIMESTAMPS = st.sampled_from([
    "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00Z", "2026-01-01T00:00:00",
    "2026-13-01T00:00:00Z", "9999-12-31T23:59:59.999999+00:00", "2026-01-01T00:00:00+24:00", "",
])
_HOSTILE_VALUES = _ANY_JSON | _TIMESTAMPS | st.sampled_from([{"k": 1}, [["x"]], "active ", "ARCHIVED", "\ud800"])
_FIELDS = ("org_id", "agent_id", "content", "category", "confidence", "usefulness", "tags", "memory_id",
           "created_at", "retrieval_count", "status")
_NON_BLANK = st.text(min_size=1, max_size=30).filter(str.strip)
_OFFSETS = st.builds(timezone, st.timedeltas(min_value=timedelta(hours=-23), max_value=timedelta(hours=23)))


@st.composite
def _valid_record(draw: st.DrawFn, position: int) -> dict[str, object]:
    record: dict[str, object] = {"org_id": str(draw(st.uuids())), "agent_id": str(draw(st.uuids())),
                                 "content": draw(_NON_BLANK), "category": draw(st.text(min_size=1, max_size=64).filter(str.strip))}
    optional = {
        "confidence": st.floats(0, 1) | st.sampled_from([0, 1]),
        "usefulness": st.floats(0, 1),
        "tags": st.lists(st.text(min_size=1, max_size=128).filter(str.strip), max_size=5),
        "memory_id": st.just(str(uuid.UUID(int=position + 1))),
        "created_at": st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2100, 1, 1),
                                   timezones=_OFFSETS).map(datetime.isoformat),
        "retrieval_count": st.integers(0, 2**63 - 1),
        "status": st.sampled_from(["active", "archived"]),
    }
    for name in draw(st.lists(st.sampled_from(sorted(optional)), unique=True)):
        record[name] = draw(optional[name])
    return record


@st.composite
def _jsonl(draw: st.DrawFn) -> tuple[list[str], bool]:
    """Lines, and whether every one is known to be valid."""
    lines, all_valid = [], True
    for position in range(draw(st.integers(1, 4))):
        record = draw(_valid_record(position))
        mangle = draw(st.sampled_from(["none", "none", "value", "drop", "extra", "raw", "deep"]))
        if mangle == "value":
            record[draw(st.sampled_from(_FIELDS))] = draw(_HOSTILE_VALUES)
        elif mangle == "drop":
            record.pop(draw(st.sampled_from(_FIELDS[:4])))
        elif mangle == "extra":
            record[draw(st.text(max_size=10))] = draw(_ANY_JSON)
        text = json.dumps(record)
        if mangle == "raw":
            text = draw(st.text(st.characters(blacklist_characters="\r\n"), max_size=60) | st.sampled_from(['{"a": [}', "[" * 40, "1" * 5000, '"\\ud800"']))
        elif mangle == "deep":
            depth = draw(st.integers(10, 3000))
            text = text[:-1] + f', "{draw(st.sampled_from(_FIELDS))}": ' + "[" * depth + "]" * depth + "}"
        lines.append(text)
        # a mangled value may happen to be valid (or a dropped/extra field a no-op): no verdict then
        all_valid = all_valid and mangle == "none"
    return lines, all_valid


def _import_in_process(lines: list[str]) -> tuple[int, str, int, Path]:
    with tempfile.TemporaryDirectory() as directory:
        data, path = Path(directory) / "ibex.db", Path(directory) / "memories.jsonl"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogatepass")
        previous = os.environ.get("IBEX_CONTEXT_DATA_PATH")
        os.environ["IBEX_CONTEXT_DATA_PATH"] = str(data)
        stderr = io.StringIO()
        try:
            with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
                code = main(["memory", "import", str(path)])
        finally:
            if previous is None:
                os.environ.pop("IBEX_CONTEXT_DATA_PATH")
            else:
                os.environ["IBEX_CONTEXT_DATA_PATH"] = previous
        with contextlib.closing(sqlite3.connect(data)) as conn:
            stored = conn.execute("SELECT count(*) FROM memories").fetchone()[0]
        return code, stderr.getvalue(), stored, path


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_jsonl())
def test_any_jsonl_imports_whole_or_exits_2_naming_line_and_field(case: tuple[list[str], bool]) -> None:
    lines, all_valid = case
    code, stderr, stored, path = _import_in_process(lines)  # an exception here is the traceback case
    assert code in (0, 2)
    event(f"exit {code}")
    if code == 0:
        assert stored == sum(1 for line in lines if line.encode("utf-8", "surrogatepass").strip())
        return
    assert not all_valid, stderr
    assert stored == 0
    assert len(stderr.strip().splitlines()) == 1, stderr
    located = re.match(rf"ibex-context: {re.escape(str(path))}: line (\d+): (.+?): \S", stderr)
    assert located, stderr
    assert 1 <= int(located.group(1)) <= len(lines)
    event(f"field {located.group(2) if located.group(2) in _FIELDS + ('line',) else 'other'}")
