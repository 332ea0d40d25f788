"""``ibex-context catalog``: list the model catalog, show one model, diff two catalog files.

- ``catalog list``: every model with its budget figures.
- ``catalog show MODEL``: every field of one model and its family, with the derived budget.
- ``--json`` (list and show): the same figures as JSON, one object per model with the keys
  model_id, provider, context_window, max_output_tokens, tokenizer_family, supports_tools,
  supports_vision, supports_streaming, estimate_kind, safety_buffer_fraction, response_reserve,
  safety_buffer, usable_window; list prints ``{"models": [...]}`` sorted by model id.
- ``catalog diff A.json B.json``: models added / removed / changed field by field, families
  added / removed / changed. Exit status: 0 identical, 1 different, 2 a file is unreadable or invalid.

``list`` and ``show`` read ``IBEX_CONTEXT_CATALOG_PATH`` when it is set, else the built-in catalog.
Derived figures: reserve = max(500, min(15% of the window, max output, 4096)), safety = window x
the family's safety fraction, and window - reserve - safety (usable_window) is the most the
context may use.
"""

from __future__ import annotations

import argparse
import json
import os

import attrs

from domain.budget import response_reserve, safety_buffer
from domain.model.catalog import ModelSpec, TokenizerFamily
from domain.model.errors import CatalogError, UnknownModelError
from entrypoints.cli.errors import EXIT_FAILURE, EXIT_OK, CliError
from entrypoints.cli.tables import key_values, table
from entrypoints.containers import ApplicationContainer, StartupError, build_container
from entrypoints.settings import Settings
from ports.errors import CatalogUnavailableError
from ports.model_catalog import ModelCatalog


_SHOW_LABELS = {"response_reserve": "response reserve", "safety_buffer": "safety buffer",
                "usable_window": "window - reserve - safety"}


@attrs.frozen
class _Loaded:
    models: dict[str, ModelSpec]
    families: dict[str, TokenizerFamily]


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "catalog", help="list, show and diff model catalogs", description=__doc__.split("\n\n", 1)[1].replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="catalog_command", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="every model with provider, window, family and budget figures")
    listing.add_argument("--json", action="store_true", help='print {"models": [...]} as JSON instead of the table')
    listing.set_defaults(handler=run_list)
    show = actions.add_parser("show", help="every field of one model and its derived budget figures")
    show.add_argument("model", metavar="MODEL", help="model id, e.g. gpt-4o")
    show.add_argument("--json", action="store_true", help="print the model's figures as one JSON object")
    show.set_defaults(handler=run_show)
    diff = actions.add_parser(
        "diff", help="compare two catalog files (exit 0 identical, 1 different, 2 bad file)",
        description="Compare two schema-version-1 catalog files. Exit 0 when identical, 1 when they differ, "
                    "2 when a file cannot be read or is invalid.",
    )
    diff.add_argument("old", metavar="A.json", help="the catalog file to compare from")
    diff.add_argument("new", metavar="B.json", help="the catalog file to compare to")
    diff.set_defaults(handler=run_diff)


def run_list(args: argparse.Namespace) -> int:
    catalog = _configured_catalog()
    models = [model_figures(catalog, spec) for spec in catalog.models()]
    if args.json:
        print(_json({"models": models}))
        return EXIT_OK
    columns = ("model_id", "provider", "context_window", "max_output_tokens", "tokenizer_family", "estimate_kind",
               "response_reserve", "safety_buffer", "usable_window")
    headers = ("MODEL", "PROVIDER", "WINDOW", "MAX OUTPUT", "FAMILY", "ESTIMATE KIND", "RESERVE", "SAFETY",
               "WINDOW-RESERVE-SAFETY")
    print(table(headers, [[m[c] for c in columns] for m in models], right=(2, 3, 6, 7, 8)))
    return EXIT_OK


def run_show(args: argparse.Namespace) -> int:
    catalog = _configured_catalog()
    try:
        spec = catalog.for_model(args.model)
    except UnknownModelError as exc:
        raise CliError(f"MODEL: {exc}") from None
    figures = model_figures(catalog, spec)
    if args.json:
        print(_json(figures))
        return EXIT_OK
    print(key_values([(_SHOW_LABELS.get(k, k), f"{v:g}" if k == "safety_buffer_fraction" else v)
                      for k, v in figures.items()]))
    return EXIT_OK


def model_figures(catalog: ModelCatalog, spec: ModelSpec) -> dict[str, object]:
    """One model's fields, its family's policy and the derived budget, under the documented JSON keys."""
    family = catalog.family(spec.tokenizer_family)
    reserve, safety = response_reserve(spec), safety_buffer(spec, family)
    return {
        "model_id": spec.model_id, "provider": spec.provider, "context_window": spec.context_window,
        "max_output_tokens": spec.max_output_tokens, "tokenizer_family": spec.tokenizer_family,
        "supports_tools": spec.supports_tools, "supports_vision": spec.supports_vision,
        "supports_streaming": spec.supports_streaming, "estimate_kind": family.estimate_kind,
        "safety_buffer_fraction": family.safety_buffer_fraction, "response_reserve": reserve,
        "safety_buffer": safety, "usable_window": spec.context_window - reserve - safety,
    }


def _json(value: object) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def run_diff(args: argparse.Namespace) -> int:
    old, new = _load_file(args.old), _load_file(args.new)
    lines = [
        *_section("models", old.models, new.models, _model_changes(old, new)),
        *_section("families", old.families, new.families, _family_changes(old.families, new.families)),
    ]
    if not lines:
        print(f"identical: {len(new.models)} models, {len(new.families)} tokenizer families")
        return EXIT_OK
    print("\n".join(lines))
    return EXIT_FAILURE


def _configured_catalog() -> ModelCatalog:
    """The catalog serving would use (the composition root's, from IBEX_CONTEXT_CATALOG_PATH)."""
    try:
        return build_container(Settings.from_env(os.environ)).adapters.catalog()
    except StartupError as exc:
        raise CliError(str(exc)) from None


def _load_file(path: str) -> _Loaded:
    """A validated catalog file; its family names come from the document the adapter validated."""
    try:
        catalog = ApplicationContainer().adapters.catalog_file(path)  # a file reader needs no settings
        with open(path, "rb") as handle:
            names = json.loads(handle.read())["tokenizer_families"]
    except (CatalogUnavailableError, CatalogError, OSError) as exc:
        raise CliError(f"{path}: {' '.join(str(exc).split())}") from None
    return _Loaded({m.model_id: m for m in catalog.models()}, {name: catalog.family(name) for name in names})


def _section(what: str, old: dict, new: dict, changed: list[str]) -> list[str]:
    added = sorted(set(new) - set(old))
    removed = sorted(set(old) - set(new))
    lines = [f"{what} added: + {name}" for name in added]
    lines += [f"{what} removed: - {name}" for name in removed]
    lines += [f"{what} changed: ~ {line}" for line in changed]
    return lines


def _model_changes(old: _Loaded, new: _Loaded) -> list[str]:
    changes = []
    for name in sorted(set(old.models) & set(new.models)):
        before, after = _model_figures(old, name), _model_figures(new, name)
        fields = [f"{k} {before[k]} -> {after[k]}" for k in before if before[k] != after[k]]
        if fields:
            changes.append(f"{name}: {'; '.join(fields)}")
    return changes


def _model_figures(loaded: _Loaded, name: str) -> dict[str, object]:
    spec = loaded.models[name]
    family = loaded.families[spec.tokenizer_family]
    reserve, safety = response_reserve(spec), safety_buffer(spec, family)
    return {**attrs.asdict(spec), "reserve": reserve, "safety": safety,
            "window-reserve-safety": spec.context_window - reserve - safety}


def _family_changes(old: dict[str, TokenizerFamily], new: dict[str, TokenizerFamily]) -> list[str]:
    changes = []
    for name in sorted(set(old) & set(new)):
        before, after = attrs.asdict(old[name]), attrs.asdict(new[name])
        fields = [f"{k} {before[k]} -> {after[k]}" for k in before if before[k] != after[k]]
        if fields:
            changes.append(f"{name}: {'; '.join(fields)}")
    return changes
