"""Deployment settings: health-only listener, drain delay, shutdown grace, connection age; server options."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from entrypoints.cli import main
from entrypoints.grpc_api.server import SERVER_OPTIONS, connection_age_options
from entrypoints.settings import Settings, SettingsError


def test_defaults() -> None:
    settings = Settings.from_env({})
    assert settings.health_addr == ""
    assert settings.drain_delay_ms == 0.0
    assert settings.shutdown_grace_ms == 5000.0
    assert (settings.max_connection_age_ms, settings.max_connection_age_grace_ms) == (30_000.0, 5000.0)


@pytest.mark.parametrize("raw, expected", [("0", 0.0), ("0s", 0.0), ("0ms", 0.0), ("0.0", 0.0),
                                            ("5s", 5000.0), ("250ms", 250.0), ("1500", 1500.0)])
def test_durations_accept_zero_and_units(raw: str, expected: float) -> None:
    for variable, field in (("IBEX_CONTEXT_DRAIN_DELAY", "drain_delay_ms"),
                            ("IBEX_CONTEXT_SHUTDOWN_GRACE", "shutdown_grace_ms"),
                            ("IBEX_CONTEXT_MAX_CONNECTION_AGE", "max_connection_age_ms"),
                            ("IBEX_CONTEXT_MAX_CONNECTION_AGE_GRACE", "max_connection_age_grace_ms")):
        assert getattr(Settings.from_env({variable: raw}), field) == expected


@pytest.mark.parametrize("raw", ["-1", "soon", "nan", "inf", "-0.5s"])
def test_a_bad_duration_names_the_variable(raw: str) -> None:
    with pytest.raises(SettingsError, match=r"^IBEX_CONTEXT_DRAIN_DELAY: expected a duration >= 0") as excinfo:
        Settings.from_env({"IBEX_CONTEXT_DRAIN_DELAY": raw})
    assert "\n" not in str(excinfo.value)


def test_health_addr_is_an_address() -> None:
    assert Settings.from_env({"IBEX_CONTEXT_HEALTH_ADDR": "0.0.0.0:9094"}).health_addr == "0.0.0.0:9094"
    with pytest.raises(SettingsError, match="IBEX_CONTEXT_HEALTH_ADDR"):
        Settings.from_env({"IBEX_CONTEXT_HEALTH_ADDR": "9094"})


def test_connection_age_options() -> None:
    assert connection_age_options(30.0, 5.0) == (("grpc.max_connection_age_ms", 30_000),
                                                 ("grpc.max_connection_age_grace_ms", 5000))
    assert connection_age_options(0.0, 5.0) == ()  # 0: connections live as long as the client keeps them


def test_keepalive_is_enforced() -> None:
    options = dict(SERVER_OPTIONS)
    assert options["grpc.http2.min_ping_interval_without_data_ms"] == 10_000
    assert options["grpc.keepalive_permit_without_calls"] == 1
    assert options["grpc.http2.max_ping_strikes"] == 2
    assert options["grpc.keepalive_time_ms"] == 30_000 and options["grpc.keepalive_timeout_ms"] == 10_000


def test_config_never_prints_redis_credentials(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for name in [n for n in os.environ if n.startswith("IBEX_CONTEXT_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("IBEX_CONTEXT_REDIS_URL",
                       "redis+sentinel://app:hunter2@s-0:26379,s-1:26379/mymaster/0?sentinel_password=hunter3")
    monkeypatch.setenv("IBEX_CONTEXT_DRAIN_DELAY", "5s")
    assert main(["config"]) == 0
    out = capsys.readouterr().out
    assert "hunter2" not in out and "hunter3" not in out
    assert "redis_url = redis+sentinel://***@s-0:26379,s-1:26379/mymaster/0?sentinel_password=***" in out
    assert "drain_delay_ms = 5000.0" in out


def test_the_deployment_variables_are_in_the_readme_configuration_table() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    for variable in ("IBEX_CONTEXT_HEALTH_ADDR", "IBEX_CONTEXT_DRAIN_DELAY", "IBEX_CONTEXT_SHUTDOWN_GRACE",
                     "IBEX_CONTEXT_MAX_CONNECTION_AGE", "IBEX_CONTEXT_MAX_CONNECTION_AGE_GRACE"):
        assert f"| `{variable}` |" in readme, variable
    assert "redis+sentinel://" in readme
