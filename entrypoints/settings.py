"""Settings: the only place the process environment is read.

``Settings.from_env(environ)`` parses every ``IBEX_CONTEXT_*`` variable into a frozen value; a bad
value raises ``SettingsError`` whose message is one line naming the variable and what it accepts.

Tracing reads the standard OpenTelemetry variables (the ``otel_*`` fields; README, Configuration):
the SDK and exporter are built from these values, not from the SDK's own reading of the process
environment, so a bad value stops start-up like any other. ``OTEL_READ_BY_SDK`` lists the OTEL_*
variables honoured but read by the SDK and exporter themselves (headers, TLS files, timeouts...).
"""

from __future__ import annotations

import ipaddress
import math
import socket
from collections.abc import Mapping

import attrs

from domain.model.assembly import SCORE_POLICIES, SCORE_SCHEMA_RELEVANCE
from domain.relevance_policy import RelevancePolicy

DEFAULT_GRPC_ADDR = "127.0.0.1:9092"
DEFAULT_HTTP_ADDR = "127.0.0.1:9093"
DEFAULT_DATA_PATH = "./.ibex-context/ibex.db"
DEFAULT_PRINCIPAL_MAX_LIFETIME_MS = 3_600_000.0  # 1 h; = entrypoints.auth.proof.DEFAULT_MAX_LIFETIME
MAX_HOT_LIMIT = 50  # the memory service's bound for GET /v1/memories/hot
MAX_COLD_LIMIT = 100  # and for POST /v1/memories/search
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})


class SettingsError(ValueError):
    """A configuration value is invalid; the message names the variable."""


def parse_timeout_ms(value: object) -> float:
    """Parse a duration the reference way: ``45ms`` -> 45, ``1s`` -> 1000, ``45`` -> 45 (ms).

    Raises:
        TypeError: for booleans.
        ValueError: for text that is not a number, non-finite or non-positive values.
    """
    if isinstance(value, bool):
        raise TypeError("timeout must be a number")
    if isinstance(value, (int, float)):
        number = float(value)
    else:
        text = str(value).strip().lower()
        scale = 1.0
        if text.endswith("ms"):
            text = text[:-2]
        elif text.endswith("s"):
            text, scale = text[:-1], 1000.0
        try:
            number = float(text.strip()) * scale
        except ValueError:
            raise ValueError(f"not a duration: {value!r}") from None
    if not math.isfinite(number):
        raise ValueError("timeout must be finite")
    if number <= 0:
        raise ValueError("timeout must be > 0")
    return number


def is_loopback(addr: str) -> bool:
    """True when every address a ``host:port`` bind address can bind to is a loopback address."""
    return not_loopback_reason(addr) is None


def not_loopback_reason(addr: str) -> str | None:
    """None when ``addr`` binds loopback only; else one clause saying why not (for the bind guard).

    The host is read as the binders read it (``[::1]:9092`` -> ``::1``). An IP address is judged as
    parsed (127.0.0.0/8, ::1, ::ffff:127.0.0.0/104); anything else is a host name, loopback only
    when every address ``socket.getaddrinfo`` resolves it to is: a name that does not resolve is
    not (``127.example.invalid`` is a name, not an address).
    """
    host = addr.rpartition(":")[0].strip("[]")
    if not host:
        return f"{addr!r} has no host, which binds every interface"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        if _loopback_ip(address):
            return None
        spread = ", which binds every interface" if address.is_unspecified else ""
        return f"{host} is not a loopback address{spread}"
    try:
        answers = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        resolved = {ipaddress.ip_address(str(sockaddr[0])) for *_, sockaddr in answers}
    except (OSError, UnicodeError, ValueError) as exc:
        return (f"host name {host!r} does not resolve ({getattr(exc, 'strerror', None) or exc}), so it cannot be shown "
                "to be loopback (a name counts as loopback only when every address it resolves to is)")
    others = sorted(str(address) for address in resolved if not _loopback_ip(address))
    if others or not resolved:
        return (f"host name {host!r} resolves to {', '.join(others) or 'no address'}, not loopback "
                "(a name counts as loopback only when every address it resolves to is)")
    return None


def _loopback_ip(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


EVENT_LOOPS = ("uvloop", "asyncio")
OTEL_SAMPLERS = ("parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio",
                 "always_on", "always_off", "traceidratio")
OTEL_PROTOCOLS = ("http/protobuf", "grpc")
OTEL_EXPORTERS = ("otlp", "none")
OTEL_READ_BY_SDK = (  # honoured, read by the SDK / exporter / API from the process environment
    "OTEL_RESOURCE_ATTRIBUTES", "OTEL_PROPAGATORS",
    "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
    "OTEL_EXPORTER_OTLP_COMPRESSION", "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
    "OTEL_EXPORTER_OTLP_CERTIFICATE", "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
    "OTEL_EXPORTER_OTLP_CLIENT_KEY", "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY",
    "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE",
    "OTEL_EXPORTER_OTLP_INSECURE", "OTEL_EXPORTER_OTLP_TRACES_INSECURE",
)
_RELEVANCE = RelevancePolicy()  # relevance_v1's defaults, declared once in the domain


@attrs.frozen
class Settings:
    timeout_ms: float = 45.0
    deadline_ms: float = 40.0
    directive_timeout_ms: float = 5.0
    hot_timeout_ms: float = 15.0
    cold_timeout_ms: float = 45.0
    memory_base_url: str = ""
    memory_api_token: str = ""
    redis_url: str = ""
    grpc_addr: str = DEFAULT_GRPC_ADDR
    http_addr: str = DEFAULT_HTTP_ADDR
    http_read_timeout_ms: float = 10_000.0  # HTTP: headers, and then the body, must arrive within this
    http_max_connections: int = 512  # HTTP: open connections beyond this are answered 503 and closed
    packer_dp_cell_ceiling: int = 70 * 6251
    packer_max_consecutive_skips: int = 5
    formatter_nonce_bytes: int = 16
    hot_limit: int = 20
    cold_limit: int = 30
    deadline_headroom_ms: float = 5.0  # kept back from the caller's gRPC deadline for packing and the answer
    data_path: str = DEFAULT_DATA_PATH
    catalog_path: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_ca: str = ""
    principal_keys: str = ""
    principal_max_lifetime_ms: float = DEFAULT_PRINCIPAL_MAX_LIFETIME_MS
    allow_insecure_bind: bool = False
    log_level: str = "INFO"
    event_loop: str = "uvloop"
    score_policy: str = SCORE_SCHEMA_RELEVANCE
    relevance_floor: float = _RELEVANCE.floor
    relevance_sharpness: float = _RELEVANCE.sharpness
    hot_slots: int = _RELEVANCE.hot_slots
    core_slots: int = _RELEVANCE.core_slots
    # deployment: a plaintext health-only listener, shutdown drain, connection age (docs/DEPLOYMENT.md)
    health_addr: str = ""
    drain_delay_ms: float = 0.0
    shutdown_grace_ms: float = 5000.0
    max_connection_age_ms: float = 30_000.0
    max_connection_age_grace_ms: float = 5000.0
    # tracing: the standard OpenTelemetry variables (README, Configuration); off without an endpoint
    otel_sdk_disabled: bool = False
    otel_traces_exporter: str = "otlp"
    otel_exporter_otlp_endpoint: str = ""
    otel_exporter_otlp_traces_endpoint: str = ""
    otel_exporter_otlp_protocol: str = "http/protobuf"
    otel_service_name: str = "ibex-context"
    otel_traces_sampler: str = "parentbased_always_on"
    otel_traces_sampler_arg: float = 1.0
    otel_bsp_max_queue_size: int = 2048
    otel_bsp_max_export_batch_size: int = 512
    otel_bsp_schedule_delay_ms: float = 5000.0
    otel_bsp_export_timeout_ms: float = 30_000.0

    @property
    def tracing_enabled(self) -> bool:
        """Spans are made and exported: an OTLP endpoint is set, the SDK not disabled, the exporter otlp."""
        return bool(self.otlp_traces_endpoint) and not self.otel_sdk_disabled and self.otel_traces_exporter == "otlp"

    @property
    def otlp_traces_endpoint(self) -> str:
        """Where spans go: the traces endpoint as given, else the base endpoint (+ ``v1/traces`` over HTTP)."""
        if self.otel_exporter_otlp_traces_endpoint:
            return self.otel_exporter_otlp_traces_endpoint
        base = self.otel_exporter_otlp_endpoint
        if not base or self.otel_exporter_otlp_protocol == "grpc":
            return base
        return base.rstrip("/") + "/v1/traces"

    @property
    def retrieval_wall_ms(self) -> float:
        return min(self.timeout_ms, self.deadline_ms)

    @property
    def uses_embedded_memory(self) -> bool:
        return not self.memory_base_url

    @property
    def uses_embedded_directives(self) -> bool:
        return not self.redis_url

    @property
    def has_auth(self) -> bool:
        return bool(self.tls_client_ca or self.principal_keys)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
        reader = _EnvReader(environ)
        settings = cls(
            timeout_ms=reader.duration(("IBEX_CONTEXT_TIMEOUT", "IBEX_CONTEXT_TIMEOUT_MS"), 45.0),
            deadline_ms=reader.duration(("IBEX_CONTEXT_DEADLINE_MS",), 40.0),
            directive_timeout_ms=reader.duration(("IBEX_CONTEXT_DIRECTIVE_TIMEOUT_MS",), 5.0),
            hot_timeout_ms=reader.duration(("IBEX_CONTEXT_HOT_TIMEOUT_MS",), 15.0),
            cold_timeout_ms=reader.duration(("IBEX_CONTEXT_COLD_TIMEOUT_MS",), 45.0),
            memory_base_url=reader.text("IBEX_CONTEXT_MEMORY_BASE_URL"),
            memory_api_token=reader.text("IBEX_CONTEXT_MEMORY_API_TOKEN"),
            redis_url=reader.text("IBEX_CONTEXT_REDIS_URL"),
            grpc_addr=reader.address("IBEX_CONTEXT_GRPC_ADDR", DEFAULT_GRPC_ADDR),
            http_addr=reader.address("IBEX_CONTEXT_HTTP_ADDR", DEFAULT_HTTP_ADDR),
            http_read_timeout_ms=reader.duration(("IBEX_CONTEXT_HTTP_READ_TIMEOUT",), 10_000.0),
            http_max_connections=reader.integer("IBEX_CONTEXT_HTTP_MAX_CONNECTIONS", 512, 1, 65_535),
            packer_dp_cell_ceiling=reader.integer("IBEX_CONTEXT_PACKER_DP_CELL_CEILING", 70 * 6251, 1, None),
            packer_max_consecutive_skips=reader.integer("IBEX_CONTEXT_PACKER_MAX_CONSECUTIVE_SKIPS", 5, 0, None),
            formatter_nonce_bytes=reader.integer("IBEX_CONTEXT_FORMATTER_NONCE_BYTES", 16, 1, 64),
            hot_limit=reader.integer("IBEX_CONTEXT_HOT_LIMIT", 20, 1, MAX_HOT_LIMIT),
            cold_limit=reader.integer("IBEX_CONTEXT_COLD_LIMIT", 30, 1, MAX_COLD_LIMIT),
            deadline_headroom_ms=reader.duration(("IBEX_CONTEXT_DEADLINE_HEADROOM_MS",), 5.0),
            data_path=reader.text("IBEX_CONTEXT_DATA_PATH") or DEFAULT_DATA_PATH,
            catalog_path=reader.text("IBEX_CONTEXT_CATALOG_PATH"),
            tls_cert=reader.text("IBEX_CONTEXT_TLS_CERT"),
            tls_key=reader.text("IBEX_CONTEXT_TLS_KEY"),
            tls_client_ca=reader.text("IBEX_CONTEXT_TLS_CLIENT_CA"),
            principal_keys=reader.text("IBEX_CONTEXT_PRINCIPAL_KEYS"),
            principal_max_lifetime_ms=reader.duration(
                ("IBEX_CONTEXT_PRINCIPAL_MAX_LIFETIME",), DEFAULT_PRINCIPAL_MAX_LIFETIME_MS),
            allow_insecure_bind=reader.boolean("IBEX_CONTEXT_ALLOW_INSECURE_BIND"),
            log_level=reader.choice("IBEX_CONTEXT_LOG_LEVEL", "INFO", ("DEBUG", "INFO", "WARNING", "ERROR")),
            event_loop=reader.choice("IBEX_CONTEXT_EVENT_LOOP", "uvloop", EVENT_LOOPS),
            score_policy=reader.choice("IBEX_CONTEXT_SCORE_POLICY", SCORE_SCHEMA_RELEVANCE, SCORE_POLICIES),
            relevance_floor=reader.number("IBEX_CONTEXT_RELEVANCE_FLOOR", _RELEVANCE.floor, 0.0, 1.0),
            relevance_sharpness=reader.number("IBEX_CONTEXT_RELEVANCE_SHARPNESS", _RELEVANCE.sharpness, 1.0, 16.0),
            hot_slots=reader.integer("IBEX_CONTEXT_HOT_SLOTS", _RELEVANCE.hot_slots, 0, MAX_HOT_LIMIT),
            core_slots=reader.integer("IBEX_CONTEXT_CORE_SLOTS", _RELEVANCE.core_slots, 0, MAX_HOT_LIMIT),
            health_addr=reader.address("IBEX_CONTEXT_HEALTH_ADDR", ""),
            drain_delay_ms=reader.duration_or_zero("IBEX_CONTEXT_DRAIN_DELAY", 0.0),
            shutdown_grace_ms=reader.duration_or_zero("IBEX_CONTEXT_SHUTDOWN_GRACE", 5000.0),
            max_connection_age_ms=reader.duration_or_zero("IBEX_CONTEXT_MAX_CONNECTION_AGE", 30_000.0),
            max_connection_age_grace_ms=reader.duration_or_zero("IBEX_CONTEXT_MAX_CONNECTION_AGE_GRACE", 5000.0),
            otel_sdk_disabled=reader.boolean("OTEL_SDK_DISABLED"),
            otel_traces_exporter=reader.choice("OTEL_TRACES_EXPORTER", "otlp", OTEL_EXPORTERS),
            otel_exporter_otlp_endpoint=reader.text("OTEL_EXPORTER_OTLP_ENDPOINT"),
            otel_exporter_otlp_traces_endpoint=reader.text("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            otel_exporter_otlp_protocol=reader.choice(
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", reader.choice("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf",
                                                                    OTEL_PROTOCOLS), OTEL_PROTOCOLS),
            otel_service_name=reader.text("OTEL_SERVICE_NAME") or "ibex-context",
            otel_traces_sampler=reader.choice("OTEL_TRACES_SAMPLER", "parentbased_always_on", OTEL_SAMPLERS),
            otel_traces_sampler_arg=reader.number("OTEL_TRACES_SAMPLER_ARG", 1.0, 0.0, 1.0),
            otel_bsp_max_queue_size=reader.integer("OTEL_BSP_MAX_QUEUE_SIZE", 2048, 1, 1_000_000),
            otel_bsp_max_export_batch_size=reader.integer("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512, 1, 1_000_000),
            otel_bsp_schedule_delay_ms=reader.duration(("OTEL_BSP_SCHEDULE_DELAY",), 5000.0),
            otel_bsp_export_timeout_ms=reader.duration(("OTEL_BSP_EXPORT_TIMEOUT",), 30_000.0),
        )
        settings.check_consistency()
        return settings

    def check_consistency(self) -> None:
        """Cross-field rules; raises SettingsError naming the variable."""
        if self.memory_base_url and not self.memory_api_token:
            raise SettingsError(
                "IBEX_CONTEXT_MEMORY_API_TOKEN: required when IBEX_CONTEXT_MEMORY_BASE_URL is set"
            )
        if self.memory_base_url and not self.memory_base_url.startswith(("http://", "https://")):
            raise SettingsError(
                f"IBEX_CONTEXT_MEMORY_BASE_URL: expected an http:// or https:// URL, got {self.memory_base_url!r}"
            )
        if bool(self.tls_cert) != bool(self.tls_key):
            raise SettingsError("IBEX_CONTEXT_TLS_CERT / IBEX_CONTEXT_TLS_KEY: set both or neither")
        if self.tls_client_ca and not self.tls_cert:
            raise SettingsError("IBEX_CONTEXT_TLS_CLIENT_CA: requires IBEX_CONTEXT_TLS_CERT and IBEX_CONTEXT_TLS_KEY")
        for name, url in (("OTEL_EXPORTER_OTLP_ENDPOINT", self.otel_exporter_otlp_endpoint),
                          ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", self.otel_exporter_otlp_traces_endpoint)):
            if url and not (url.startswith(("http://", "https://")) and len(url.split("://", 1)[1].strip("/")) > 0):
                raise SettingsError(f"{name}: expected an http:// or https:// URL, got {url!r}")
        if self.otel_bsp_max_export_batch_size > self.otel_bsp_max_queue_size:
            raise SettingsError("OTEL_BSP_MAX_EXPORT_BATCH_SIZE: must not exceed OTEL_BSP_MAX_QUEUE_SIZE "
                                f"({self.otel_bsp_max_queue_size}), got {self.otel_bsp_max_export_batch_size}")


@attrs.frozen
class _EnvReader:
    environ: Mapping[str, str]

    def _raw(self, name: str) -> str | None:
        value = self.environ.get(name)
        return None if value is None or value.strip() == "" else value

    def text(self, name: str) -> str:
        return (self._raw(name) or "").strip()

    def duration(self, names: tuple[str, ...], default: float) -> float:
        for name in names:
            raw = self._raw(name)
            if raw is None:
                continue
            try:
                return parse_timeout_ms(raw)
            except (TypeError, ValueError):
                raise SettingsError(
                    f"{name}: expected a positive finite duration such as 45ms, 1s or 45 (milliseconds), got {raw!r}"
                ) from None
        return default

    def duration_or_zero(self, name: str, default: float) -> float:
        """A duration like ``duration``, where ``0`` (``0s``, ``0ms``) is accepted too."""
        raw = self._raw(name)
        if raw is not None and raw.strip().lower().removesuffix("ms").removesuffix("s").strip() in ("0", "0.0", ".0", "0."):
            return 0.0
        try:
            return self.duration((name,), default)
        except SettingsError:
            raise SettingsError(
                f"{name}: expected a duration >= 0 such as 0, 500ms, 5s or 45 (milliseconds), got {raw!r}"
            ) from None

    def integer(self, name: str, default: int, low: int, high: int | None) -> int:
        raw = self._raw(name)
        if raw is None:
            return default
        bounds = f">= {low}" if high is None else f"in {low}..{high}"
        try:
            value = int(raw.strip())
        except ValueError:
            raise SettingsError(f"{name}: expected an integer {bounds}, got {raw!r}") from None
        if value < low or (high is not None and value > high):
            raise SettingsError(f"{name}: expected an integer {bounds}, got {raw!r}")
        return value

    def number(self, name: str, default: float, low: float, high: float) -> float:
        raw = self._raw(name)
        if raw is None:
            return default
        try:
            value = float(raw.strip())
        except ValueError:
            value = math.nan
        if not low <= value <= high:  # NaN fails too
            raise SettingsError(f"{name}: expected a number in {low:g}..{high:g}, got {raw!r}")
        return value

    def boolean(self, name: str) -> bool:
        raw = (self._raw(name) or "").strip().lower()
        if raw in _TRUE:
            return True
        if raw in _FALSE:
            return False
        raise SettingsError(f"{name}: expected true or false, got {raw!r}")

    def choice(self, name: str, default: str, allowed: tuple[str, ...]) -> str:
        raw = self._raw(name)
        if raw is None:
            return default
        spelled = {option.upper(): option for option in allowed}  # case-insensitive, canonical spelling out
        value = spelled.get(raw.strip().upper())
        if value is None:
            raise SettingsError(f"{name}: expected one of {', '.join(allowed)}, got {raw!r}")
        return value

    def address(self, name: str, default: str) -> str:
        raw = self._raw(name)
        if raw is None:
            return default
        value = raw.strip()
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise SettingsError(f"{name}: expected host:port (e.g. 127.0.0.1:9092), got {raw!r}")
        return value
