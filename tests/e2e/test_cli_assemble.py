"""``ibex-context assemble`` as a subprocess over a seeded embedded backend file."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from adapters.embedded import EmbeddedDirectiveStore, EmbeddedMemoryStore
from adapters.system_clock import SystemClock
from contracts.ibex.context.v1 import context_pb2 as pb
from entrypoints.cli import build_parser

pytestmark = pytest.mark.e2e

REPO_ROOT = Path(__file__).resolve().parents[2]
ORG = "3f0e2d1c-4b5a-4697-8877-665544332211"
AGENT = "9a8b7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d"
DIRECTIVE = "You are the gardening assistant."
FACTS = ("The user grows tomatoes on a balcony", "The user waters tomatoes at dawn", "The user fears slugs on tomatoes")
GENEROUS = {"IBEX_CONTEXT_TIMEOUT": "3s", "IBEX_CONTEXT_DEADLINE_MS": "3000", "IBEX_CONTEXT_DIRECTIVE_TIMEOUT_MS": "2000",
            "IBEX_CONTEXT_HOT_TIMEOUT_MS": "2000", "IBEX_CONTEXT_COLD_TIMEOUT_MS": "2000"}
BASE_FLAGS = ("--org-id", ORG, "--agent-id", AGENT, "--model", "gpt-4o")


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, tuple[str, ...]]:
    path = tmp_path_factory.mktemp("cli") / "ibex.db"

    async def write() -> tuple[str, ...]:
        store = EmbeddedMemoryStore.open(path, clock=SystemClock())
        ids = tuple([await store.add(org_id=ORG, agent_id=AGENT, content=text, category="factual") for text in FACTS])
        await store.close()
        directives = EmbeddedDirectiveStore.open(path, clock=SystemClock())
        await directives.set_directive(ORG, AGENT, DIRECTIVE)
        await directives.close()
        return ids

    return str(path), asyncio.run(write())


def run_cli(data_path: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("IBEX_CONTEXT_")}
    env = {**clean, **GENEROUS, "IBEX_CONTEXT_DATA_PATH": data_path}
    return subprocess.run([sys.executable, "-m", "entrypoints.cli", "assemble", *args], capture_output=True, text=True,
                          input=stdin, env=env, cwd=REPO_ROOT, timeout=180)


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ibex-context: "), result.stderr
    return lines[0]


def test_report_prints_the_context_the_explain_table_and_the_summary(seeded: tuple[str, tuple[str, ...]]) -> None:
    path, ids = seeded
    result = run_cli(path, *BASE_FLAGS, "--query", "tomatoes", "--message", "user:how are my plants?",
                     "--max-memories", "2")
    assert result.returncode == 0, result.stderr
    context, candidates, summary = result.stdout.split("\n\n== ")[:3]
    assert DIRECTIVE in context and "user: how are my plants?" in context
    assert sum(fact in context for fact in FACTS) == 2
    header = candidates.splitlines()[1].split()
    assert header == ["#", "MEMORY", "ID", "SOURCE", "CATEGORY", "SCORE", "SIMILARITY", "CONFIDENCE", "TOKENS", "RESULT"]
    rows = [line.split() for line in candidates.splitlines()[3:]]
    assert {row[1] for row in rows} == set(ids)
    assert sorted(row[-1] for row in rows if row[-1] == "included") == ["included", "included"]
    assert "max_memories" in {row[-1] for row in rows}
    for label in ("degradation level : L0", "estimate kind     : exact_o200k_base", "usable budget", "tokens used",
                  "packing path", "BRANCH", "directive", "cold"):
        assert label in summary, label


def test_json_prints_the_response_in_the_http_mapping(seeded: tuple[str, tuple[str, ...]], tmp_path: Path) -> None:
    path, ids = seeded
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"org_id": ORG, "agentId": AGENT, "model": "gpt-4o", "query": "slugs",
                                   "requestId": "cli-1"}), encoding="utf-8")
    result = run_cli(path, "--request", str(request), "--json")
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    assert set(body) == {f.json_name for f in pb.AssembleContextResponse.DESCRIPTOR.fields}
    assert body["requestId"] == "cli-1" and body["memoriesIncluded"] == 1
    assert {m["memoryId"] for m in body["memoriesUsed"]} == set(ids)
    # relevance_v1: only the memory about slugs relates to the query; the others stay out, with their reason
    outcome = sorted((m["memoryId"], m["detail"] or m["exclusion"]) for m in body["memoriesUsed"])
    assert outcome == sorted([(ids[0], "below_relevance_floor"), (ids[1], "below_relevance_floor"),
                              (ids[2], "included"), (ids[2], "duplicate")])  # the hot copy of the searched one


def test_request_from_stdin(seeded: tuple[str, tuple[str, ...]]) -> None:
    body = json.dumps({"orgId": ORG, "agentId": AGENT, "model": "gpt-4o", "options": {"skipHotMemories": True}})
    result = run_cli(seeded[0], "--request", "-", "--json", stdin=body)
    assert result.returncode == 0, result.stderr
    branches = {b["name"]: (b["outcome"], b["detail"]) for b in json.loads(result.stdout)["branches"]}
    assert branches["hot"] == ("skipped", "skip_hot_memories") and branches["cold"] == ("skipped", "blank_query")


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("--org-id", "nope", "--agent-id", AGENT, "--model", "gpt-4o"), "--org-id"),
        ((*BASE_FLAGS[:4], "--model", "gpt-17"), "'gpt-17'"),
        ((*BASE_FLAGS, "--max-memories", "five"), "--max-memories"),
        ((*BASE_FLAGS, "--message", "no colon here"), "--message #1"),
        (("--agent-id", AGENT), "--org-id, --model"),
        (("--request", "/nonexistent/request.json"), "/nonexistent/request.json"),
        (("--request", "-", "--model", "gpt-4o"), "--model"),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_it(seeded: tuple[str, tuple[str, ...]], args: tuple, named: str) -> None:
    assert named in one_error_line(run_cli(seeded[0], *args))


def test_an_unknown_model_lists_the_known_models(seeded: tuple[str, tuple[str, ...]]) -> None:
    from_flags = one_error_line(run_cli(seeded[0], *BASE_FLAGS[:4], "--model", "gpt-17"))
    body = json.dumps({"orgId": ORG, "agentId": AGENT, "model": "gpt-17"})
    from_stdin = one_error_line(run_cli(seeded[0], "--request", "-", stdin=body))
    message = ("unknown model 'gpt-17': not in the model catalog (known: claude-haiku-4-5, claude-opus-4-5,"
               " claude-sonnet-4-5, gpt-3.5-turbo, gpt-4-turbo, gpt-4o, gpt-4o-mini)")
    assert from_flags == f"ibex-context: --model: {message}"
    assert from_stdin == f"ibex-context: --request -: field model: {message}"


@pytest.mark.parametrize(
    ("stdin", "expected"),
    [
        ('{"orgId": ', "standard input is not valid JSON: Expecting value: line 1 column 11 (char 10)"),
        ('{\n  "orgId": "a",\n  "model" "gpt-4o"\n}',
         "standard input is not valid JSON: Expecting ':' delimiter: line 3 column 11 (char 28)"),
        ("", "standard input is not valid JSON: Expecting value: line 1 column 1 (char 0)"),
        ("[1, 2]", "standard input must be a JSON object, got an array"),
    ],
)
def test_bad_json_on_stdin_names_standard_input(seeded: tuple[str, tuple[str, ...]], stdin: str, expected: str) -> None:
    assert one_error_line(run_cli(seeded[0], "--request", "-", stdin=stdin)) == f"ibex-context: --request -: {expected}"


def test_bad_json_in_a_file_names_the_flag_and_the_file(seeded: tuple[str, tuple[str, ...]], tmp_path: Path) -> None:
    request = tmp_path / "bad.json"
    request.write_text("{nope", encoding="utf-8")
    line = one_error_line(run_cli(seeded[0], "--request", str(request)))
    assert line.startswith(f"ibex-context: --request {request}: the file is not valid JSON: ")
    assert "line 1 column 2" in line


def test_a_request_id_is_generated_when_none_is_given(seeded: tuple[str, tuple[str, ...]]) -> None:
    first, second = (json.loads(run_cli(seeded[0], *BASE_FLAGS, "--json").stdout)["requestId"] for _ in range(2))
    for generated in (first, second):
        assert str(uuid.UUID(generated)) == generated and uuid.UUID(generated).version == 4
    assert first != second
    report = run_cli(seeded[0], *BASE_FLAGS, "--request-id", "mine-7")
    assert report.returncode == 0, report.stderr
    assert "request id        : mine-7" in report.stdout
    echoed = json.loads(run_cli(seeded[0], *BASE_FLAGS, "--request-id", "mine-7", "--json").stdout)["requestId"]
    assert echoed == "mine-7"


def test_a_bad_field_in_the_request_file_is_named(seeded: tuple[str, tuple[str, ...]], tmp_path: Path) -> None:
    request = tmp_path / "bad.json"
    request.write_text(json.dumps({"orgId": ORG, "agentId": AGENT, "model": "gpt-4o", "options": {"maxMemories": True}}))
    assert "field options.max_memories" in one_error_line(run_cli(seeded[0], "--request", str(request)))


def test_every_option_has_help_text() -> None:
    result = subprocess.run([sys.executable, "-m", "entrypoints.cli", "assemble", "--help"], capture_output=True,
                            text=True, cwd=REPO_ROOT, timeout=120)
    assert result.returncode == 0
    assemble = build_parser()._subparsers._group_actions[0].choices["assemble"]
    options = [action for action in assemble._actions if action.option_strings]
    assert len(options) == 20
    for action in options:
        assert action.help and action.option_strings[-1] in result.stdout, action.option_strings
