from __future__ import annotations

import os
import socket

import attrs
import pytest

from domain.relevance_policy import RelevancePolicy
from domain.usecases.assembly_config import AssemblyConfig
from domain.usecases.search_memories import SearchConfig
from entrypoints.cli import main
from entrypoints.settings import (
    SERVICE_PREFIX,
    TRACING_PREFIX,
    Boolean,
    Settings,
    SettingsError,
    Text,
    declared,
    is_loopback,
    not_loopback_reason,
    parse_timeout_ms,
)


def test_defaults_match_the_reference() -> None:
    settings = Settings.from_env({})
    assert settings.timeout_ms == 45.0
    assert settings.deadline_ms == 40.0
    assert settings.retrieval_wall_ms == 40.0
    assert (settings.directive_timeout_ms, settings.hot_timeout_ms, settings.cold_timeout_ms) == (5.0, 15.0, 45.0)
    assert settings.grpc_addr == "127.0.0.1:9092"
    assert settings.http_addr == "127.0.0.1:9093"
    assert settings.formatter_nonce_bytes == 16
    assert settings.packer_dp_cell_ceiling == 437570
    assert settings.uses_embedded_memory and settings.uses_embedded_directives
    assert settings.data_path == "./.ibex-context/ibex.db"
    assert settings.allow_insecure_bind is False


@pytest.mark.parametrize(("raw", "expected"), [("45ms", 45.0), ("1s", 1000.0), ("45", 45.0), (" 2.5MS ", 2.5), (30, 30.0)])
def test_timeouts_parse_like_the_reference(raw: object, expected: float) -> None:
    assert parse_timeout_ms(raw) == expected


@pytest.mark.parametrize("raw", ["nan", "inf", "-inf", float("nan"), float("inf"), "0", "-5", "abc", "5m"])
def test_bad_timeouts_are_rejected(raw: object) -> None:
    with pytest.raises(ValueError):
        parse_timeout_ms(raw)


def test_boolean_timeout_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        parse_timeout_ms(True)


def test_bad_deadline_names_the_variable_in_one_line() -> None:
    with pytest.raises(SettingsError) as excinfo:
        Settings.from_env({"IBEX_CONTEXT_DEADLINE_MS": "abc"})
    message = str(excinfo.value)
    assert message.startswith("IBEX_CONTEXT_DEADLINE_MS:")
    assert "45ms" in message and "\n" not in message


def test_timeout_alias_and_wall() -> None:
    settings = Settings.from_env({"IBEX_CONTEXT_TIMEOUT_MS": "30", "IBEX_CONTEXT_DEADLINE_MS": "40ms"})
    assert settings.retrieval_wall_ms == 30.0
    assert Settings.from_env({"IBEX_CONTEXT_TIMEOUT": "1s"}).timeout_ms == 1000.0


@pytest.mark.parametrize(("name", "raw"), [
    ("IBEX_CONTEXT_FORMATTER_NONCE_BYTES", "65"),
    ("IBEX_CONTEXT_FORMATTER_NONCE_BYTES", "0"),
    ("IBEX_CONTEXT_PACKER_DP_CELL_CEILING", "0"),
    ("IBEX_CONTEXT_PACKER_MAX_CONSECUTIVE_SKIPS", "-1"),
    ("IBEX_CONTEXT_GRPC_ADDR", "nonsense"),
    ("IBEX_CONTEXT_HTTP_ADDR", "127.0.0.1:99999"),
    ("IBEX_CONTEXT_ALLOW_INSECURE_BIND", "maybe"),
    ("IBEX_CONTEXT_HOT_TIMEOUT_MS", "-1"),
    ("IBEX_CONTEXT_HOT_LIMIT", "0"),
    ("IBEX_CONTEXT_HOT_LIMIT", "51"),
    ("IBEX_CONTEXT_COLD_LIMIT", "101"),
    ("IBEX_CONTEXT_COLD_LIMIT", "ten"),
    ("IBEX_CONTEXT_DEADLINE_HEADROOM_MS", "0"),
])
def test_each_bad_value_names_its_variable(name: str, raw: str) -> None:
    with pytest.raises(SettingsError, match=f"^{name}"):
        Settings.from_env({name: raw})


def test_memory_url_requires_a_token() -> None:
    with pytest.raises(SettingsError, match="IBEX_CONTEXT_MEMORY_API_TOKEN"):
        Settings.from_env({"IBEX_CONTEXT_MEMORY_BASE_URL": "http://127.0.0.1:8005"})
    settings = Settings.from_env({"IBEX_CONTEXT_MEMORY_BASE_URL": "http://127.0.0.1:8005", "IBEX_CONTEXT_MEMORY_API_TOKEN": "t"})
    assert not settings.uses_embedded_memory


def test_tls_cert_and_key_go_together() -> None:
    with pytest.raises(SettingsError, match="IBEX_CONTEXT_TLS_CERT"):
        Settings.from_env({"IBEX_CONTEXT_TLS_CERT": "/tmp/cert.pem"})


def test_insecure_override_parses_booleans() -> None:
    assert Settings.from_env({"IBEX_CONTEXT_ALLOW_INSECURE_BIND": "true"}).allow_insecure_bind
    assert not Settings.from_env({"IBEX_CONTEXT_ALLOW_INSECURE_BIND": "0"}).allow_insecure_bind


@pytest.mark.parametrize(("addr", "loopback"), [
    ("127.0.0.1:9092", True), ("127.5.5.5:9092", True), ("localhost:9092", True), ("[::1]:9092", True),
    ("::1:9092", True),  # the binders split host from port at the last colon, as is_loopback does
    ("[::ffff:127.0.0.1]:9092", True),
    ("0.0.0.0:9092", False), ("10.0.0.1:9092", False), ("10.0.0.5:9092", False), ("[::]:9092", False),
    ("127.example.invalid:9092", False),  # a host name, not an address: judged by what it resolves to
    ("no-such-host.invalid:9092", False), (":9092", False),
])
def test_loopback_detection(addr: str, loopback: bool) -> None:
    assert is_loopback(addr) is loopback


def _resolver(answers: dict[str, list[str]]):  # type: ignore[no-untyped-def]
    def getaddrinfo(host: str, port: object, *args: object, **kwargs: object) -> list[tuple]:  # type: ignore[type-arg]
        if host not in answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET6 if ":" in ip else socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, 0))
                for ip in answers[host]]
    return getaddrinfo


def test_a_host_name_is_loopback_only_when_every_address_it_resolves_to_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "getaddrinfo", _resolver({
        "127.internal.example": ["127.0.0.1", "::1"],
        "127.mixed.example": ["127.0.0.1", "203.0.113.7"],
        "127.public.example": ["203.0.113.8"],
    }))
    assert is_loopback("127.internal.example:9092")
    assert not is_loopback("127.mixed.example:9092") and not is_loopback("127.public.example:9092")
    assert "resolves to 203.0.113.7, not loopback" in str(not_loopback_reason("127.mixed.example:9092"))
    assert "does not resolve" in str(not_loopback_reason("127.example.invalid:9092"))


def test_an_ip_address_is_never_resolved(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "getaddrinfo", _resolver({}))
    assert is_loopback("127.0.0.1:1") and is_loopback("[::1]:1") and not is_loopback("10.0.0.1:1")


def test_hot_and_cold_limits_default_to_20_and_30_and_parse() -> None:
    # The reference searched 10; 30 was chosen with bench.quality (docs/PERFORMANCE.md, "Context quality").
    assert (Settings.from_env({}).hot_limit, Settings.from_env({}).cold_limit) == (20, 30)
    settings = Settings.from_env({"IBEX_CONTEXT_HOT_LIMIT": "40", "IBEX_CONTEXT_COLD_LIMIT": " 100 "})
    assert (settings.hot_limit, settings.cold_limit) == (40, 100)


def test_deadline_headroom_defaults_to_10ms_and_parses_durations() -> None:
    assert Settings.from_env({}).deadline_headroom_ms == 10.0
    assert Settings.from_env({"IBEX_CONTEXT_DEADLINE_HEADROOM_MS": "20ms"}).deadline_headroom_ms == 20.0


@pytest.mark.parametrize(("raw", "expected"), [(None, "uvloop"), ("asyncio", "asyncio"), (" UVLoop ", "uvloop")])
def test_event_loop_defaults_to_uvloop_and_parses_case_insensitively(raw: str | None, expected: str) -> None:
    environ = {} if raw is None else {"IBEX_CONTEXT_EVENT_LOOP": raw}
    assert Settings.from_env(environ).event_loop == expected


def test_log_level_keeps_its_upper_case_spelling() -> None:
    assert Settings.from_env({"IBEX_CONTEXT_LOG_LEVEL": "debug"}).log_level == "DEBUG"


def test_the_score_policy_and_its_parameters_are_read_and_checked() -> None:
    defaults = Settings.from_env({})
    assert defaults.score_policy == "relevance_v1"
    assert (defaults.relevance_floor, defaults.relevance_sharpness, defaults.hot_slots, defaults.core_slots) == (
        0.3, 5.0, 4, 2)
    assert defaults.relevance_policy() == RelevancePolicy(floor=0.3, sharpness=5.0, hot_slots=4, core_slots=2)
    tuned = Settings.from_env({"IBEX_CONTEXT_SCORE_POLICY": "Interim_V1", "IBEX_CONTEXT_RELEVANCE_FLOOR": "0.5",
                               "IBEX_CONTEXT_RELEVANCE_SHARPNESS": "6", "IBEX_CONTEXT_HOT_SLOTS": "0",
                               "IBEX_CONTEXT_CORE_SLOTS": "1"})
    assert (tuned.score_policy, tuned.relevance_floor, tuned.relevance_sharpness, tuned.hot_slots, tuned.core_slots) == (
        "interim_v1", 0.5, 6.0, 0, 1)


@pytest.mark.parametrize(("name", "raw", "accepts"), [
    ("IBEX_CONTEXT_SCORE_POLICY", "weighted_v1", "one of relevance_v1, interim_v1"),
    ("IBEX_CONTEXT_RELEVANCE_FLOOR", "1.5", "a number in 0..1"),
    ("IBEX_CONTEXT_RELEVANCE_FLOOR", "nan", "a number in 0..1"),
    ("IBEX_CONTEXT_RELEVANCE_SHARPNESS", "0.5", "a number in 1..16"),
    ("IBEX_CONTEXT_HOT_SLOTS", "-1", "an integer in 0..50"),
])
def test_bad_score_policy_settings_name_the_variable(name: str, raw: str, accepts: str) -> None:
    with pytest.raises(SettingsError) as excinfo:
        Settings.from_env({name: raw})
    assert str(excinfo.value) == f"{name}: expected {accepts}, got {raw!r}"


def test_principal_max_lifetime_defaults_to_the_verifiers_default_and_parses_durations() -> None:
    from datetime import timedelta

    from entrypoints.auth.proof import DEFAULT_MAX_LIFETIME

    default = Settings.from_env({})
    assert default.principal_max_lifetime == DEFAULT_MAX_LIFETIME == timedelta(hours=1)
    assert Settings.from_env({"IBEX_CONTEXT_PRINCIPAL_MAX_LIFETIME": "300s"}).principal_max_lifetime_ms == 300_000.0
    with pytest.raises(SettingsError, match="^IBEX_CONTEXT_PRINCIPAL_MAX_LIFETIME: expected a positive"):
        Settings.from_env({"IBEX_CONTEXT_PRINCIPAL_MAX_LIFETIME": "0"})


# ------------------------------------------------------------------ the declaration table
def test_the_declared_defaults_are_the_defaults_of_an_empty_environment() -> None:
    assert Settings() == Settings.from_env({})


def test_every_setting_is_declared_once_under_its_own_variables() -> None:
    names = [name for _, setting in declared() for name in setting.env]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    assert all(name.startswith((SERVICE_PREFIX, TRACING_PREFIX)) for name in names)
    assert [field.name for field, _ in declared()] == [field.name for field in attrs.fields(Settings)]
    assert all(setting.help.strip() for _, setting in declared())


@pytest.mark.parametrize("name", [s.variable for _, s in declared() if not isinstance(s.kind, Text)])
def test_a_value_a_setting_does_not_accept_names_its_variable_and_what_it_accepts(name: str) -> None:
    field, setting = next((f, s) for f, s in declared() if s.variable == name)
    raw = "maybe" if isinstance(setting.kind, Boolean) else "not-a-value"
    with pytest.raises(SettingsError) as excinfo:
        Settings.from_env({name: raw})
    assert str(excinfo.value) == f"{name}: expected {setting.kind.expected}, got {raw!r}"


def test_a_settings_value_built_directly_is_checked_against_the_same_declaration() -> None:
    with pytest.raises(SettingsError, match=r"^IBEX_CONTEXT_HOT_LIMIT: expected an integer in 1\.\.50, got 0$"):
        Settings(hot_limit=0)
    with pytest.raises(SettingsError, match="^IBEX_CONTEXT_RELEVANCE_SHARPNESS: expected a number in 1..16"):
        Settings(relevance_sharpness=0.5)
    with pytest.raises(SettingsError, match="^IBEX_CONTEXT_SCORE_POLICY: expected one of relevance_v1, interim_v1"):
        Settings(score_policy="weighted_v1")
    assert Settings(hot_limit=50, health_addr="", drain_delay_ms=0.0).hot_limit == 50


def test_the_first_variable_set_of_a_setting_wins_and_every_one_set_is_checked() -> None:
    both = {"IBEX_CONTEXT_TIMEOUT": "30ms", "IBEX_CONTEXT_TIMEOUT_MS": "60"}
    assert Settings.from_env(both).timeout_ms == 30.0
    assert Settings.from_env({"IBEX_CONTEXT_TIMEOUT_MS": "60"}).timeout_ms == 60.0
    protocols = {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}
    assert Settings.from_env(protocols).otel_exporter_otlp_protocol == "grpc"
    with pytest.raises(SettingsError, match="^OTEL_EXPORTER_OTLP_PROTOCOL: expected one of http/protobuf, grpc"):
        Settings.from_env({**protocols, "OTEL_EXPORTER_OTLP_PROTOCOL": "thrift"})
    assert Settings.from_env({"IBEX_CONTEXT_TIMEOUT": "   "}).timeout_ms == 45.0  # blank is unset


def test_min_confidence_defaults_to_0_and_is_checked() -> None:
    assert Settings.from_env({}).min_confidence == 0.0
    assert Settings.from_env({"IBEX_CONTEXT_MIN_CONFIDENCE": "0.25"}).min_confidence == 0.25
    with pytest.raises(SettingsError, match="^IBEX_CONTEXT_MIN_CONFIDENCE: expected a number in 0..1, got '2'$"):
        Settings.from_env({"IBEX_CONTEXT_MIN_CONFIDENCE": "2"})


# ------------------------------------------------------------------ what the use cases run with
def test_the_assembly_config_comes_from_the_settings_in_seconds() -> None:
    settings = Settings.from_env({
        "IBEX_CONTEXT_TIMEOUT": "45ms", "IBEX_CONTEXT_DEADLINE_MS": "30", "IBEX_CONTEXT_DIRECTIVE_TIMEOUT_MS": "4",
        "IBEX_CONTEXT_HOT_TIMEOUT_MS": "12", "IBEX_CONTEXT_COLD_TIMEOUT_MS": "1s", "IBEX_CONTEXT_FORMATTER_NONCE_BYTES": "8",
        "IBEX_CONTEXT_HOT_LIMIT": "40", "IBEX_CONTEXT_COLD_LIMIT": "25", "IBEX_CONTEXT_MIN_CONFIDENCE": "0.5",
        "IBEX_CONTEXT_DEADLINE_HEADROOM_MS": "20", "IBEX_CONTEXT_SCORE_POLICY": "interim_v1",
        "IBEX_CONTEXT_RELEVANCE_FLOOR": "0.4", "IBEX_CONTEXT_RELEVANCE_SHARPNESS": "2", "IBEX_CONTEXT_HOT_SLOTS": "3",
        "IBEX_CONTEXT_CORE_SLOTS": "1",
    })
    assert settings.assembly_config() == AssemblyConfig(
        wall_s=0.030, directive_timeout_s=0.004, hot_timeout_s=0.012, cold_timeout_s=1.0, nonce_bytes=8, hot_limit=40,
        cold_limit=25, min_confidence=0.5, score_policy="interim_v1", deadline_headroom_s=0.020,
        relevance=RelevancePolicy(floor=0.4, sharpness=2.0, hot_slots=3, core_slots=1))
    assert settings.search_config() == SearchConfig(timeout_s=1.0, deadline_headroom_s=0.020)


def test_assembly_config_overrides_replace_only_the_fields_named() -> None:
    declared_defaults = Settings().assembly_config()
    fast = Settings().assembly_config(wall_s=0.1, cold_timeout_s=0.02)
    assert (fast.wall_s, fast.cold_timeout_s) == (0.1, 0.02)
    assert attrs.evolve(fast, wall_s=declared_defaults.wall_s, cold_timeout_s=declared_defaults.cold_timeout_s) == (
        declared_defaults)
    assert (declared_defaults.wall_s, declared_defaults.hot_limit, declared_defaults.cold_limit) == (0.040, 20, 30)
    with pytest.raises(TypeError):
        Settings().assembly_config(no_such_field=1)


# ------------------------------------------------------------------ ibex-context config
def test_config_prints_every_declared_setting_once_and_masks_the_secrets(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for name in [n for n in os.environ if n.startswith((SERVICE_PREFIX, TRACING_PREFIX))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("IBEX_CONTEXT_MEMORY_BASE_URL", "http://127.0.0.1:8005")
    monkeypatch.setenv("IBEX_CONTEXT_MEMORY_API_TOKEN", "s3cret-token")
    monkeypatch.setenv("IBEX_CONTEXT_HOT_LIMIT", "7")
    assert main(["config"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" = ", 1)[0] for line in lines[:-1]] == [field.name for field, _ in declared()]
    assert "hot_limit = 7" in lines and "memory_api_token = ***" in lines
    assert "deadline_headroom_ms = 10.0" in lines and "cold_limit = 30" in lines
    assert not any("s3cret" in line for line in lines)
    assert lines[-1].startswith("tracing = off")


def test_config_markdown_prints_the_readme_tables_without_reading_the_environment(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("IBEX_CONTEXT_HOT_LIMIT", "not read")
    assert main(["config", "--markdown"]) == 0
    out = capsys.readouterr().out
    assert "| `IBEX_CONTEXT_HOT_LIMIT` | `20` | integer 1..50 | hot memories asked for |" in out
    assert "| `OTEL_BSP_MAX_QUEUE_SIZE` | `2048` | integer 1..1000000 |" in out
