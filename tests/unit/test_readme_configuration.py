"""The README's configuration tables are the settings' declarations (``entrypoints.settings``).

Every declared setting has a row with its variables and its default, no row names a variable
that is not declared, and each table is exactly what the declarations render
(``ibex-context config --markdown`` prints them for pasting).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from entrypoints.settings import SERVICE_PREFIX, TRACING_PREFIX, declared, markdown_table

README = Path(__file__).resolve().parents[2] / "README.md"
PREFIXES = (SERVICE_PREFIX, TRACING_PREFIX)  # the order of the two tables in the Configuration section
_VARIABLE = re.compile(r"`((?:IBEX_CONTEXT|OTEL)_[A-Z0-9_]+)`")


def configuration_tables() -> list[list[str]]:
    """The markdown tables of the README's Configuration section, in order, as lists of lines."""
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## Configuration\n")
    end = text.index("\n## ", start + 1)
    tables: list[list[str]] = []
    previous_was_row = False
    for line in text[start:end].splitlines():
        is_row = line.startswith("|")
        if is_row and not previous_was_row:
            tables.append([])
        if is_row:
            tables[-1].append(line)
        previous_was_row = is_row
    return tables


def rows(table: list[str]) -> dict[tuple[str, ...], str]:
    """Each data row's variables (from its first cell) -> its default cell."""
    found: dict[tuple[str, ...], str] = {}
    for line in table[2:]:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        found[tuple(_VARIABLE.findall(cells[0]))] = cells[1]
    return found


def test_the_configuration_section_has_one_table_per_prefix() -> None:
    tables = configuration_tables()
    assert len(tables) == len(PREFIXES), [table[:1] for table in tables]
    for table in tables:
        assert table[0] == "| variable | default | accepts | meaning |"


@pytest.mark.parametrize(("index", "prefix"), list(enumerate(PREFIXES)))
def test_every_declared_setting_has_a_row_with_its_default_and_no_row_is_undeclared(index: int, prefix: str) -> None:
    documented = rows(configuration_tables()[index])
    expected = {setting.env: setting.documented_default(field.default)
                for field, setting in declared() if setting.variable.startswith(prefix)}
    missing = sorted(set(expected) - set(documented))
    undeclared = sorted(set(documented) - set(expected))
    assert not missing, f"declared settings without a README row: {missing}"
    assert not undeclared, f"README rows naming no declared setting: {undeclared}"
    wrong = {env: (documented[env], default) for env, default in expected.items() if documented[env] != default}
    assert not wrong, f"README default differs from the declared one (README, declared): {wrong}"


@pytest.mark.parametrize(("index", "prefix"), list(enumerate(PREFIXES)))
def test_each_table_is_what_the_declarations_render(index: int, prefix: str) -> None:
    # On a failure: paste the output of `ibex-context config --markdown` over the README's tables.
    assert "\n".join(configuration_tables()[index]) == markdown_table(prefix)
