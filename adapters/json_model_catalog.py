"""Model catalog read from a schema-version-1 JSON document (built in, or an operator's file)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from importlib import resources
from os import PathLike
from typing import Any

from domain.model.catalog import ModelSpec, TokenizerFamily
from domain.model.errors import CatalogError, UnknownModelError
from ports.errors import CatalogUnavailableError
from ports.model_catalog import ModelCatalog

SCHEMA_VERSION = 1
BUILTIN_PACKAGE = "adapters"
BUILTIN_RESOURCE = "data/model_capabilities.v1.json"

_MODEL_STRINGS = ("model_id", "provider", "tokenizer_family")
_MODEL_POSITIVE_INTS = ("context_window", "max_output_tokens")
_MODEL_BOOLS = ("supports_tools", "supports_vision", "supports_streaming")


class JsonModelCatalog(ModelCatalog):
    """An immutable, validated catalog of models and tokenizer families."""

    def __init__(
        self,
        models: Mapping[str, ModelSpec],
        families: Mapping[str, TokenizerFamily],
        source: str = "",
    ) -> None:
        self._models = dict(models)
        self._families = dict(families)
        self._sorted = tuple(self._models[model_id] for model_id in sorted(self._models))
        self._source = source

    @classmethod
    def builtin(cls) -> JsonModelCatalog:
        """The catalog shipped as package data (``adapters/data/model_capabilities.v1.json``).

        Raises:
            CatalogUnavailableError: the package data is missing or is not valid JSON.
            CatalogError: the document is invalid.
        """
        origin = f"package resource {BUILTIN_PACKAGE}/{BUILTIN_RESOURCE}"
        try:
            raw = resources.files(BUILTIN_PACKAGE).joinpath(BUILTIN_RESOURCE).read_bytes()
        except OSError as e:
            raise CatalogUnavailableError(f"model catalog {origin} cannot be read: {e}") from e
        return cls.from_document(_parse_json(raw, origin))

    @classmethod
    def from_path(cls, path: str | PathLike[str]) -> JsonModelCatalog:
        """Load and validate the catalog document at ``path``.

        Raises:
            CatalogUnavailableError: the file cannot be read or is not valid JSON (names the path).
            CatalogError: the document is invalid.
        """
        try:
            with open(path, "rb") as handle:
                raw = handle.read()
        except OSError as e:
            raise CatalogUnavailableError(f"model catalog file {path!s} cannot be read: {e}") from e
        return cls.from_document(_parse_json(raw, f"file {path!s}"))

    @classmethod
    def from_document(cls, document: Any) -> JsonModelCatalog:
        """Validate a decoded catalog document (a dict) and build the catalog.

        Raises:
            CatalogError: naming the offending field and the model (index and id) or family.
        """
        if not isinstance(document, Mapping):
            raise CatalogError(f"model catalog: the document must be a JSON object, got {_type(document)}")
        _check_schema_version(document)
        families = _families(document.get("tokenizer_families"))
        models = _models(document.get("models"), families)
        return cls(models, families, _source(document))

    @property
    def source(self) -> str:
        """The document's free-text ``source`` ("" when absent)."""
        return self._source

    @property
    def schema_version(self) -> int:
        return SCHEMA_VERSION

    def for_model(self, model_id: str) -> ModelSpec:
        wanted = model_id.strip()
        spec = self._models.get(wanted)
        if spec is None:
            raise UnknownModelError(wanted, self._models)
        return spec

    def family(self, name: str) -> TokenizerFamily:
        found = self._families.get(name)
        if found is None:
            raise UnknownModelError(name)
        return found

    def models(self) -> tuple[ModelSpec, ...]:
        return self._sorted


def _parse_json(raw: bytes, origin: str) -> Any:
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CatalogUnavailableError(f"model catalog {origin} is not valid UTF-8 JSON: {e}") from e


def _type(value: object) -> str:
    return type(value).__name__


def _check_schema_version(document: Mapping[str, Any]) -> None:
    if "schema_version" not in document:
        raise CatalogError(f"model catalog: field 'schema_version' is missing (expected {SCHEMA_VERSION})")
    version = document["schema_version"]
    if isinstance(version, bool) or version != SCHEMA_VERSION:
        raise CatalogError(
            f"model catalog: unsupported schema_version {version!r} (expected {SCHEMA_VERSION})"
        )


def _source(document: Mapping[str, Any]) -> str:
    source = document.get("source", "")
    if not isinstance(source, str):
        raise CatalogError(f"model catalog: field 'source' must be a string, got {_type(source)}")
    return source


def _families(raw: Any) -> dict[str, TokenizerFamily]:
    if not isinstance(raw, Mapping) or not raw:
        raise CatalogError("model catalog: field 'tokenizer_families' must be a non-empty object")
    return {name: _family(name, entry) for name, entry in raw.items()}


def _family(name: Any, entry: Any) -> TokenizerFamily:
    where = f"model catalog: tokenizer_families[{name!r}]"
    if not isinstance(name, str) or not name.strip():
        raise CatalogError(f"{where}: a family name must not be blank")
    if not isinstance(entry, Mapping):
        raise CatalogError(f"{where} must be an object, got {_type(entry)}")
    kind = entry.get("estimate_kind")
    if not isinstance(kind, str) or not kind.strip():
        raise CatalogError(f"{where}: field 'estimate_kind' must be a non-empty string, got {kind!r}")
    fraction = entry.get("safety_buffer_fraction")
    is_number = isinstance(fraction, int | float) and not isinstance(fraction, bool)
    if not is_number or not math.isfinite(fraction) or not 0.0 <= fraction <= 1.0:
        raise CatalogError(
            f"{where}: field 'safety_buffer_fraction' must be a number in [0, 1], got {fraction!r}"
        )
    return TokenizerFamily(name=name, estimate_kind=kind, safety_buffer_fraction=float(fraction))


def _models(raw: Any, families: Mapping[str, TokenizerFamily]) -> dict[str, ModelSpec]:
    if not isinstance(raw, list) or not raw:
        raise CatalogError("model catalog: field 'models' must be a non-empty array")
    models: dict[str, ModelSpec] = {}
    first_index: dict[str, int] = {}
    for index, entry in enumerate(raw):
        spec = _model(index, entry, families)
        if spec.model_id in models:
            raise CatalogError(
                f"model catalog: models[{index}] (id '{spec.model_id}'): duplicate model_id,"
                f" already defined by models[{first_index[spec.model_id]}]"
            )
        models[spec.model_id] = spec
        first_index[spec.model_id] = index
    return models


def _model(index: int, entry: Any, families: Mapping[str, TokenizerFamily]) -> ModelSpec:
    if not isinstance(entry, Mapping):
        raise CatalogError(f"model catalog: models[{index}] must be an object, got {_type(entry)}")
    model_id = entry.get("model_id")
    where = f"model catalog: models[{index}]" + (f" (id '{model_id}')" if isinstance(model_id, str) else "")
    for field in (*_MODEL_STRINGS, *_MODEL_POSITIVE_INTS, *_MODEL_BOOLS):
        if field not in entry:
            raise CatalogError(f"{where}: field '{field}' is missing")
        _check_field(where, field, entry[field])
    if entry["tokenizer_family"] not in families:
        raise CatalogError(
            f"{where}: field 'tokenizer_family' names '{entry['tokenizer_family']}',"
            f" which is not in tokenizer_families ({', '.join(sorted(families))})"
        )
    return ModelSpec(
        model_id=entry["model_id"],
        provider=entry["provider"],
        context_window=entry["context_window"],
        max_output_tokens=entry["max_output_tokens"],
        tokenizer_family=entry["tokenizer_family"],
        supports_tools=entry["supports_tools"],
        supports_vision=entry["supports_vision"],
        supports_streaming=entry["supports_streaming"],
    )


def _check_field(where: str, field: str, value: Any) -> None:
    if field in _MODEL_STRINGS:
        if not isinstance(value, str) or not value or value != value.strip():
            raise CatalogError(
                f"{where}: field '{field}' must be a non-empty string"
                f" without surrounding whitespace, got {value!r}"
            )
    elif field in _MODEL_POSITIVE_INTS:
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise CatalogError(f"{where}: field '{field}' must be an integer > 0, got {value!r}")
    elif not isinstance(value, bool):
        raise CatalogError(f"{where}: field '{field}' must be a boolean, got {value!r}")
