"""JsonModelCatalog: the built-in document, validation errors, and the package data in the wheel."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pytest

from adapters.json_model_catalog import JsonModelCatalog
from domain.model.errors import CatalogError, UnknownModelError
from ports.errors import CatalogUnavailableError

REPO_ROOT = Path(__file__).resolve().parents[3]
CATALOG_FILE = REPO_ROOT / "adapters" / "data" / "model_capabilities.v1.json"

# Reference section 2.3: model, provider, window, max_output, family, reserve, safety, window-reserve-safety.
REFERENCE_TABLE = [
    ("claude-haiku-4-5", "anthropic", 200000, 64000, "claude", 4096, 10000, 185904),
    ("claude-opus-4-5", "anthropic", 200000, 64000, "claude", 4096, 10000, 185904),
    ("claude-sonnet-4-5", "anthropic", 200000, 64000, "claude", 4096, 10000, 185904),
    ("gpt-3.5-turbo", "openai", 16385, 4096, "cl100k_base", 2457, 327, 13601),
    ("gpt-4-turbo", "openai", 128000, 4096, "cl100k_base", 4096, 2560, 121344),
    ("gpt-4o", "openai", 128000, 16384, "o200k_base", 4096, 2560, 121344),
    ("gpt-4o-mini", "openai", 128000, 16384, "o200k_base", 4096, 2560, 121344),
]


@pytest.fixture
def document() -> dict[str, Any]:
    return copy.deepcopy(json.loads(CATALOG_FILE.read_text(encoding="utf-8")))


def test_builtin_catalog_is_schema_1_with_the_reference_models() -> None:
    catalog = JsonModelCatalog.builtin()
    assert catalog.schema_version == 1
    assert catalog.source
    assert catalog.for_model("gpt-4o").tokenizer_family == "o200k_base"
    assert catalog.for_model("claude-sonnet-4-5").provider == "anthropic"
    assert [spec.model_id for spec in catalog.models()] == [row[0] for row in REFERENCE_TABLE]


def test_builtin_file_declares_schema_version_1(document: dict[str, Any]) -> None:
    assert document["schema_version"] == 1


@pytest.mark.parametrize(
    ("family", "kind", "fraction"),
    [
        ("o200k_base", "exact_o200k_base", 0.02),
        ("cl100k_base", "exact_cl100k_base", 0.02),
        ("claude", "runes_div_3_5", 0.05),
        ("unknown", "chars_div_4", 0.10),
    ],
)
def test_builtin_families_count_exactly_where_a_public_tokenizer_exists(
    family: str, kind: str, fraction: float
) -> None:
    found = JsonModelCatalog.builtin().family(family)
    assert (found.name, found.estimate_kind, found.safety_buffer_fraction) == (family, kind, fraction)


def test_gpt_4o_is_counted_with_the_exact_o200k_tokenizer() -> None:
    catalog = JsonModelCatalog.builtin()
    assert catalog.family(catalog.for_model("gpt-4o").tokenizer_family).estimate_kind == "exact_o200k_base"


@pytest.mark.parametrize("row", REFERENCE_TABLE, ids=[row[0] for row in REFERENCE_TABLE])
def test_reference_reserve_and_safety_follow_from_the_catalog_data(row: tuple[Any, ...]) -> None:
    model_id, provider, window, max_output, family, reserve, safety, remaining = row
    catalog = JsonModelCatalog.builtin()
    spec = catalog.for_model(model_id)
    assert (spec.provider, spec.context_window, spec.max_output_tokens, spec.tokenizer_family) == (
        provider,
        window,
        max_output,
        family,
    )
    derived_reserve = max(500, min(int(spec.context_window * 0.15), spec.max_output_tokens, 4096))
    derived_safety = int(spec.context_window * catalog.family(spec.tokenizer_family).safety_buffer_fraction)
    assert (derived_reserve, derived_safety) == (reserve, safety)
    assert spec.context_window - derived_reserve - derived_safety == remaining


def test_every_model_streams_and_uses_tools_and_only_gpt_3_5_lacks_vision() -> None:
    models = JsonModelCatalog.builtin().models()
    assert all(spec.supports_tools and spec.supports_streaming for spec in models)
    assert [spec.model_id for spec in models if not spec.supports_vision] == ["gpt-3.5-turbo"]


def test_model_lookup_strips_whitespace_then_matches_exactly() -> None:
    catalog = JsonModelCatalog.builtin()
    assert catalog.for_model("  gpt-4o-mini\n").model_id == "gpt-4o-mini"
    with pytest.raises(UnknownModelError):
        catalog.for_model("GPT-4O")


def test_unknown_model_error_names_the_model_and_the_known_ones() -> None:
    catalog = JsonModelCatalog.builtin()
    with pytest.raises(UnknownModelError, match="gpt-9-ultra") as caught:
        catalog.for_model("gpt-9-ultra")
    assert caught.value.model == "gpt-9-ultra"
    known = tuple(spec.model_id for spec in catalog.models())
    assert caught.value.known == known == tuple(sorted(known))
    assert str(caught.value).endswith(f"(known: {', '.join(known)})")


def test_unknown_family_raises_unknown_model_error_naming_it() -> None:
    with pytest.raises(UnknownModelError, match="no_such_family"):
        JsonModelCatalog.builtin().family("no_such_family")


def test_safety_fraction_above_one_is_rejected(document: dict[str, Any]) -> None:
    document["tokenizer_families"]["claude"]["safety_buffer_fraction"] = 1.5
    with pytest.raises(CatalogError, match=r"tokenizer_families\['claude'\].*safety_buffer_fraction.*1\.5"):
        JsonModelCatalog.from_document(document)


@pytest.mark.parametrize("fraction", [-0.01, "0.1", None, True, float("nan")])
def test_safety_fraction_must_be_a_number_in_the_unit_interval(
    document: dict[str, Any], fraction: Any
) -> None:
    document["tokenizer_families"]["unknown"]["safety_buffer_fraction"] = fraction
    with pytest.raises(CatalogError, match="safety_buffer_fraction"):
        JsonModelCatalog.from_document(document)


def test_safety_fraction_bounds_zero_and_one_are_accepted(document: dict[str, Any]) -> None:
    document["tokenizer_families"]["unknown"]["safety_buffer_fraction"] = 0
    document["tokenizer_families"]["claude"]["safety_buffer_fraction"] = 1
    catalog = JsonModelCatalog.from_document(document)
    assert catalog.family("unknown").safety_buffer_fraction == 0.0
    assert catalog.family("claude").safety_buffer_fraction == 1.0


@pytest.mark.parametrize("version", [99, 0, "1", 1.5, True])
def test_schema_version_other_than_1_is_rejected(document: dict[str, Any], version: Any) -> None:
    document["schema_version"] = version
    with pytest.raises(CatalogError, match="unsupported schema_version"):
        JsonModelCatalog.from_document(document)


def test_missing_schema_version_is_rejected(document: dict[str, Any]) -> None:
    del document["schema_version"]
    with pytest.raises(CatalogError, match="'schema_version' is missing"):
        JsonModelCatalog.from_document(document)


@pytest.mark.parametrize(
    "field",
    [
        "model_id",
        "provider",
        "context_window",
        "max_output_tokens",
        "tokenizer_family",
        "supports_tools",
        "supports_vision",
        "supports_streaming",
    ],
)
def test_missing_model_field_is_named_with_the_model_index(document: dict[str, Any], field: str) -> None:
    del document["models"][2][field]
    with pytest.raises(CatalogError, match=rf"models\[2\].*'{field}' is missing"):
        JsonModelCatalog.from_document(document)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("context_window", 0),
        ("context_window", -5),
        ("context_window", "128000"),
        ("context_window", 128000.0),
        ("max_output_tokens", True),
        ("supports_tools", "yes"),
        ("supports_vision", 1),
        ("provider", ""),
        ("provider", 7),
        ("tokenizer_family", " o200k_base"),
    ],
)
def test_wrongly_typed_model_field_is_named_with_model_id(
    document: dict[str, Any], field: str, value: Any
) -> None:
    document["models"][5][field] = value
    with pytest.raises(CatalogError, match=rf"models\[5\] \(id 'gpt-4o'\): field '{field}'"):
        JsonModelCatalog.from_document(document)


def test_model_with_an_undeclared_tokenizer_family_is_rejected(document: dict[str, Any]) -> None:
    document["models"][0]["tokenizer_family"] = "llama3"
    with pytest.raises(CatalogError, match=r"models\[0\] \(id 'claude-haiku-4-5'\).*'llama3'"):
        JsonModelCatalog.from_document(document)


def test_duplicate_model_ids_are_rejected(document: dict[str, Any]) -> None:
    document["models"].append(copy.deepcopy(document["models"][5]))
    with pytest.raises(CatalogError, match=r"models\[7\] \(id 'gpt-4o'\): duplicate model_id.*models\[5\]"):
        JsonModelCatalog.from_document(document)


@pytest.mark.parametrize("kind", ["", "   ", None, 4])
def test_estimate_kind_must_be_a_non_empty_string(document: dict[str, Any], kind: Any) -> None:
    document["tokenizer_families"]["claude"]["estimate_kind"] = kind
    with pytest.raises(CatalogError, match=r"tokenizer_families\['claude'\].*estimate_kind"):
        JsonModelCatalog.from_document(document)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda doc: doc.update(models=[]), "'models' must be a non-empty array"),
        (lambda doc: doc.update(models={"gpt-4o": {}}), "'models' must be a non-empty array"),
        (lambda doc: doc["models"].__setitem__(1, "gpt-4o"), r"models\[1\] must be an object"),
        (lambda doc: doc.update(tokenizer_families={}), "'tokenizer_families' must be a non-empty object"),
        (
            lambda doc: doc["tokenizer_families"].__setitem__("claude", 0.05),
            r"\['claude'\] must be an object",
        ),
        (lambda doc: doc.update(source=3), "'source' must be a string"),
    ],
)
def test_malformed_document_structure_is_named(document: dict[str, Any], mutate: Any, message: str) -> None:
    mutate(document)
    with pytest.raises(CatalogError, match=message):
        JsonModelCatalog.from_document(document)


def test_document_must_be_an_object() -> None:
    with pytest.raises(CatalogError, match="must be a JSON object, got list"):
        JsonModelCatalog.from_document([1])


def test_from_path_loads_a_valid_operator_file(tmp_path: Path, document: dict[str, Any]) -> None:
    document["models"] = [document["models"][5] | {"model_id": "gpt-4o-2024-08-06"}]
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    catalog = JsonModelCatalog.from_path(path)
    assert [spec.model_id for spec in catalog.models()] == ["gpt-4o-2024-08-06"]


def test_bad_json_file_is_unavailable_naming_the_path(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"schema_version": 1, "models": [', encoding="utf-8")
    with pytest.raises(CatalogUnavailableError, match="broken.json"):
        JsonModelCatalog.from_path(path)


def test_non_utf8_file_is_unavailable_naming_the_path(tmp_path: Path) -> None:
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"source": "caf\xe9"}')
    with pytest.raises(CatalogUnavailableError, match="latin1.json"):
        JsonModelCatalog.from_path(path)


def test_missing_file_is_unavailable_naming_the_path(tmp_path: Path) -> None:
    with pytest.raises(CatalogUnavailableError, match="nowhere.json"):
        JsonModelCatalog.from_path(tmp_path / "nowhere.json")


def _project_copy(destination: Path) -> Path:
    """The files a wheel build reads, copied so the build leaves the working tree untouched."""
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    includes = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = [pattern.rstrip("*") for pattern in includes]
    source = destination / "project"
    source.mkdir()
    shutil.copy2(REPO_ROOT / "pyproject.toml", source)
    for name in ("README.md", "LICENSE"):
        if (REPO_ROOT / name).exists():
            shutil.copy2(REPO_ROOT / name, source)
    for package in packages:
        shutil.copytree(REPO_ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    return source


def _build_wheel(tmp_path: Path) -> Path:
    out = tmp_path / "dist"
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q"]
    subprocess.run([*command, "-w", str(out), str(_project_copy(tmp_path))], check=True, timeout=300)
    (wheel,) = out.glob("ibex_context-*.whl")
    return wheel


def test_catalog_ships_inside_the_wheel_and_loads_from_an_install(tmp_path: Path) -> None:
    wheel = _build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        assert archive.read("adapters/data/model_capabilities.v1.json") == CATALOG_FILE.read_bytes()
    target = tmp_path / "site"
    install = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q"]
    install += ["--target", str(target)]
    subprocess.run([*install, str(wheel)], check=True, timeout=300)
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]); import adapters, domain;"
        "assert adapters.__file__.startswith(sys.argv[1]) and domain.__file__.startswith(sys.argv[1]);"
        "from adapters.json_model_catalog import JsonModelCatalog;"
        "print(JsonModelCatalog.builtin().for_model('gpt-4o').tokenizer_family)"
    )
    run = subprocess.run(
        [sys.executable, "-c", probe, str(target)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "o200k_base"
