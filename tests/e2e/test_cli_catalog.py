"""``ibex-context catalog list|show|diff`` as subprocesses: output, exit codes and one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO_ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("IBEX_CONTEXT_")}
    return subprocess.run([sys.executable, "-m", "entrypoints.cli", *args], capture_output=True, text=True,
                          env={**clean, **env}, cwd=REPO_ROOT, timeout=120)


def builtin_document() -> dict:
    return json.loads(resources.files("adapters").joinpath("data/model_capabilities.v1.json").read_bytes())


def write(path: Path, document: object) -> str:
    path.write_text(json.dumps(document), encoding="utf-8")
    return str(path)


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ibex-context: "), result.stderr
    return lines[0]


def test_list_shows_every_builtin_model_with_budget_figures() -> None:
    result = run_cli("catalog", "list")
    assert result.returncode == 0, result.stderr
    header, _rule, *rows = result.stdout.splitlines()
    assert header.split() == ["MODEL", "PROVIDER", "WINDOW", "MAX", "OUTPUT", "FAMILY", "ESTIMATE", "KIND", "RESERVE",
                              "SAFETY", "WINDOW-RESERVE-SAFETY"]
    by_model = {row.split()[0]: row.split() for row in rows}
    assert set(by_model) == {m["model_id"] for m in builtin_document()["models"]}
    assert by_model["gpt-4o"] == ["gpt-4o", "openai", "128000", "16384", "o200k_base", "exact_o200k_base", "4096",
                                  "2560", "121344"]
    assert by_model["gpt-3.5-turbo"][-3:] == ["2457", "327", "13601"]
    assert by_model["claude-sonnet-4-5"][-3:] == ["4096", "10000", "185904"]


def test_list_reads_the_configured_catalog_path(tmp_path: Path) -> None:
    document = builtin_document()
    document["models"] = [dict(document["models"][0], model_id="house-model", context_window=1000, max_output_tokens=8000)]
    result = run_cli("catalog", "list", IBEX_CONTEXT_CATALOG_PATH=write(tmp_path / "c.json", document))
    assert result.returncode == 0, result.stderr
    (row,) = result.stdout.splitlines()[2:]
    assert row.split()[0] == "house-model" and row.split()[-3] == "500"  # reserve floor


def test_a_bad_configured_catalog_is_one_line_naming_the_variable(tmp_path: Path) -> None:
    line = one_error_line(run_cli("catalog", "list", IBEX_CONTEXT_CATALOG_PATH=str(tmp_path / "missing.json")))
    assert "IBEX_CONTEXT_CATALOG_PATH" in line


def test_show_prints_every_field_and_the_derived_budget() -> None:
    result = run_cli("catalog", "show", " gpt-4o-mini ")
    assert result.returncode == 0, result.stderr
    fields = {k.strip(): v.strip() for k, v in (line.split(" : ", 1) for line in result.stdout.splitlines())}
    assert fields == {
        "model_id": "gpt-4o-mini", "provider": "openai", "context_window": "128000", "max_output_tokens": "16384",
        "tokenizer_family": "o200k_base", "supports_tools": "yes", "supports_vision": "yes",
        "supports_streaming": "yes", "estimate_kind": "exact_o200k_base", "safety_buffer_fraction": "0.02",
        "response reserve": "4096", "safety buffer": "2560", "window - reserve - safety": "121344",
    }


def test_show_of_an_unknown_model_exits_2_naming_it_and_the_known_models() -> None:
    line = one_error_line(run_cli("catalog", "show", "gpt-17"))
    known = ", ".join(sorted(m["model_id"] for m in builtin_document()["models"]))
    assert "'gpt-17'" in line and line.endswith(f"(known: {known})")


JSON_KEYS = ["model_id", "provider", "context_window", "max_output_tokens", "tokenizer_family", "supports_tools",
             "supports_vision", "supports_streaming", "estimate_kind", "safety_buffer_fraction", "response_reserve",
             "safety_buffer", "usable_window"]  # the documented keys, in order


def test_list_json_is_every_model_with_the_documented_keys() -> None:
    result = run_cli("catalog", "list", "--json")
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    assert list(body) == ["models"]
    models = body["models"]
    assert [m["model_id"] for m in models] == sorted(m["model_id"] for m in builtin_document()["models"])
    assert all(list(m) == JSON_KEYS for m in models)
    by_model = {m["model_id"]: m for m in models}
    assert by_model["gpt-4o"] == {
        "model_id": "gpt-4o", "provider": "openai", "context_window": 128000, "max_output_tokens": 16384,
        "tokenizer_family": "o200k_base", "supports_tools": True, "supports_vision": True,
        "supports_streaming": True, "estimate_kind": "exact_o200k_base", "safety_buffer_fraction": 0.02,
        "response_reserve": 4096, "safety_buffer": 2560, "usable_window": 121344,
    }
    assert [by_model["gpt-3.5-turbo"][k] for k in ("response_reserve", "safety_buffer", "usable_window")] == [
        2457, 327, 13601]


def test_list_json_agrees_with_the_table() -> None:
    models = json.loads(run_cli("catalog", "list", "--json").stdout)["models"]
    rows = [row.split() for row in run_cli("catalog", "list").stdout.splitlines()[2:]]
    columns = ("model_id", "provider", "context_window", "max_output_tokens", "tokenizer_family", "estimate_kind",
               "response_reserve", "safety_buffer", "usable_window")
    assert rows == [[str(m[c]) for c in columns] for m in models]


def test_list_json_reads_the_configured_catalog_path(tmp_path: Path) -> None:
    document = builtin_document()
    document["models"] = [dict(document["models"][0], model_id="house-model", context_window=1000,
                               max_output_tokens=8000)]
    result = run_cli("catalog", "list", "--json", IBEX_CONTEXT_CATALOG_PATH=write(tmp_path / "c.json", document))
    assert result.returncode == 0, result.stderr
    (model,) = json.loads(result.stdout)["models"]
    assert (model["model_id"], model["response_reserve"]) == ("house-model", 500)


def test_show_json_is_the_models_entry_of_list_json() -> None:
    result = run_cli("catalog", "show", " claude-sonnet-4-5 ", "--json")
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    listed = {m["model_id"]: m for m in json.loads(run_cli("catalog", "list", "--json").stdout)["models"]}
    assert list(shown) == JSON_KEYS
    assert shown == listed["claude-sonnet-4-5"]
    assert (shown["estimate_kind"], shown["safety_buffer_fraction"], shown["usable_window"]) == (
        "runes_div_3_5", 0.05, 185904)


def test_show_json_of_an_unknown_model_is_the_same_one_line_error() -> None:
    result = run_cli("catalog", "show", "gpt-17", "--json")
    assert "'gpt-17'" in one_error_line(result) and "gpt-4o-mini" in result.stderr
    assert result.stdout == ""


def test_diff_of_identical_catalogs_exits_0(tmp_path: Path) -> None:
    a = write(tmp_path / "a.json", builtin_document())
    b = write(tmp_path / "b.json", builtin_document())
    result = run_cli("catalog", "diff", a, b)
    assert (result.returncode, result.stdout.strip()) == (0, "identical: 7 models, 4 tokenizer families")


def test_diff_lists_models_and_families_added_removed_and_changed(tmp_path: Path) -> None:
    old = builtin_document()
    new = builtin_document()
    new["models"] = [m for m in new["models"] if m["model_id"] != "gpt-3.5-turbo"]
    new["models"].append(dict(new["models"][0], model_id="claude-next"))
    for model in new["models"]:
        if model["model_id"] == "gpt-4o":
            model["context_window"] = 200000
    new["tokenizer_families"]["claude"]["safety_buffer_fraction"] = 0.04
    new["tokenizer_families"]["spare"] = {"estimate_kind": "chars_div_4", "safety_buffer_fraction": 0.1}
    result = run_cli("catalog", "diff", write(tmp_path / "a.json", old), write(tmp_path / "b.json", new))
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert "models added: + claude-next" in lines
    assert "models removed: - gpt-3.5-turbo" in lines
    assert ("models changed: ~ gpt-4o: context_window 128000 -> 200000; reserve 4096 -> 4096"
            not in lines)  # unchanged figures are not listed
    assert "models changed: ~ gpt-4o: context_window 128000 -> 200000; safety 2560 -> 4000; "\
           "window-reserve-safety 121344 -> 191904" in lines
    assert "models changed: ~ claude-haiku-4-5: safety 10000 -> 8000; window-reserve-safety 185904 -> 187904" in lines
    assert "families added: + spare" in lines
    assert "families changed: ~ claude: safety_buffer_fraction 0.05 -> 0.04" in lines


@pytest.mark.parametrize("problem", ["missing", "not_json", "bad_schema"])
def test_diff_of_a_bad_file_exits_2_naming_it(tmp_path: Path, problem: str) -> None:
    good = write(tmp_path / "good.json", builtin_document())
    bad = tmp_path / "bad.json"
    if problem == "not_json":
        bad.write_text("{nope", encoding="utf-8")
    elif problem == "bad_schema":
        write(bad, dict(builtin_document(), schema_version=2))
    line = one_error_line(run_cli("catalog", "diff", good, str(bad)))
    assert str(bad) in line
