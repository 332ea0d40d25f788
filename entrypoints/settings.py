"""Settings: the only place the process environment is read, and where every setting is declared.

Each field of ``Settings`` is declared once, by ``setting(...)``: the variables it is read from,
its kind (how a value is parsed and what it accepts: bounds, choices), its default and its help.
From that one declaration come

* ``Settings.from_env(environ)``: parsing and validation; a bad value raises ``SettingsError``
  whose message is one line naming the variable and what it accepts;
* the same check when a ``Settings`` is built directly (tests, benches);
* ``ibex-context config`` (``declared()``: every setting, secrets masked);
* the README's configuration tables (``markdown_table``; a test keeps the README in step).

Values flow on to the use cases without restatement: ``assembly_config()``, ``relevance_policy()``
and ``search_config()`` build the domain's configuration values from the settings; the domain
classes have no defaults of their own for them. ``Settings()`` holds the declared defaults, so
``Settings().assembly_config(wall_s=0.1)`` is the use case's configuration with overrides.

Tracing reads the standard OpenTelemetry variables (the ``otel_*`` fields; README, Configuration):
the SDK and exporter are built from these values, not from the SDK's own reading of the process
environment, so a bad value stops start-up like any other. ``OTEL_READ_BY_SDK`` lists the OTEL_*
variables honoured but read by the SDK and exporter themselves (headers, TLS files, timeouts...).
"""

from __future__ import annotations

import ipaddress
import math
import re
import socket
from collections.abc import Iterator, Mapping
from datetime import timedelta
from typing import Any

import attrs

from domain.model.assembly import SCORE_POLICIES, ScoreSchema
from domain.relevance_policy import RelevancePolicy
from domain.usecases.assembly_config import AssemblyConfig
from domain.usecases.search_memories import SearchConfig

DEFAULT_GRPC_ADDR = "127.0.0.1:9092"
DEFAULT_HTTP_ADDR = "127.0.0.1:9093"
DEFAULT_DATA_PATH = "./.ibex-context/ibex.db"
DEFAULT_PRINCIPAL_MAX_LIFETIME_MS = 3_600_000.0  # 1 h; = entrypoints.auth.proof.DEFAULT_MAX_LIFETIME
MAX_HOT_LIMIT = 50  # the memory service's bound for GET /v1/memories/hot
MAX_COLD_LIMIT = 100  # and for POST /v1/memories/search
SERVICE_PREFIX = "IBEX_CONTEXT_"
TRACING_PREFIX = "OTEL_"
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
_URL_SECRETS = re.compile(r"(?<=://)[^@/]*(?=@)|(?<=sentinel_password=)[^&]*")  # userinfo, sentinel password
_DECLARATION = "ibex_context.setting"  # the attrs metadata key of a field's declaration


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
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
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


# ------------------------------------------------------------------ kinds: how a value is read
@attrs.frozen
class Duration:
    """Milliseconds from ``45ms``, ``1s`` or ``45``; > 0 (``zero_ok``: >= 0, ``0`` turns it off)."""

    zero_ok: bool = False

    @property
    def expected(self) -> str:
        if self.zero_ok:
            return "a duration >= 0 such as 0, 500ms, 5s or 45 (milliseconds)"
        return "a positive finite duration such as 45ms, 1s or 45 (milliseconds)"

    @property
    def summary(self) -> str:
        return "duration >= 0" if self.zero_ok else "duration > 0"

    def parse(self, raw: str) -> float:
        if self.zero_ok and raw.strip().lower().removesuffix("ms").removesuffix("s").strip() in ("0", "0.0", ".0", "0."):
            return 0.0
        return parse_timeout_ms(raw)

    def allows(self, value: object) -> bool:
        return (_is_number(value) and math.isfinite(value)  # type: ignore[arg-type]
                and (value >= 0 if self.zero_ok else value > 0))  # type: ignore[operator]

    def shown(self, value: float) -> str:
        if value == 0:
            return "0"
        if value >= 1000 and value % 1000 == 0:
            return f"{value / 1000:g}s"
        return f"{value:g}ms"


@attrs.frozen
class Integer:
    low: int
    high: int | None = None

    @property
    def expected(self) -> str:
        return f"an integer {self._bounds}"

    @property
    def summary(self) -> str:
        return f"integer {self._bounds.removeprefix('in ')}"

    @property
    def _bounds(self) -> str:
        return f">= {self.low}" if self.high is None else f"in {self.low}..{self.high}"

    def parse(self, raw: str) -> int:
        return int(raw.strip())

    def allows(self, value: object) -> bool:
        return (isinstance(value, int) and not isinstance(value, bool) and value >= self.low
                and (self.high is None or value <= self.high))

    def shown(self, value: int) -> str:
        return str(value)


@attrs.frozen
class Number:
    low: float
    high: float

    @property
    def expected(self) -> str:
        return f"a number in {self.low:g}..{self.high:g}"

    @property
    def summary(self) -> str:
        return f"number {self.low:g}..{self.high:g}"

    def parse(self, raw: str) -> float:
        return float(raw.strip())

    def allows(self, value: object) -> bool:
        return _is_number(value) and self.low <= value <= self.high  # type: ignore[operator]  # NaN fails too

    def shown(self, value: float) -> str:
        return f"{value:g}"


@attrs.frozen
class Boolean:
    expected = "true or false"
    summary = "`true` / `false`"

    def parse(self, raw: str) -> bool:
        text = raw.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise ValueError(raw)

    def allows(self, value: object) -> bool:
        return isinstance(value, bool)

    def shown(self, value: bool) -> str:
        return "true" if value else "false"


@attrs.frozen
class Choice:
    """One of ``options``, read case-insensitively, kept in its canonical spelling."""

    options: tuple[str, ...]

    @property
    def expected(self) -> str:
        return f"one of {', '.join(self.options)}"

    @property
    def summary(self) -> str:
        return ", ".join(f"`{option}`" for option in self.options)

    def parse(self, raw: str) -> str:
        spelled = {option.upper(): option for option in self.options}
        value = spelled.get(raw.strip().upper())
        if value is None:
            raise ValueError(raw)
        return value

    def allows(self, value: object) -> bool:
        return value in self.options

    def shown(self, value: str) -> str:
        return str(value)


@attrs.frozen
class Address:
    """``host:port``; ``optional``: empty means none (the default of a listener that is off)."""

    optional: bool = False
    expected = "host:port (e.g. 127.0.0.1:9092)"
    summary = "`host:port`"

    def parse(self, raw: str) -> str:
        value = raw.strip()
        if not self._valid(value):
            raise ValueError(raw)
        return value

    def allows(self, value: object) -> bool:
        return isinstance(value, str) and ((self.optional and value == "") or self._valid(value))

    def shown(self, value: str) -> str:
        return value

    @staticmethod
    def _valid(value: str) -> bool:
        host, sep, port = value.rpartition(":")
        return bool(sep and host and port.isdigit() and 0 <= int(port) <= 65535)


@attrs.frozen
class Text:
    """Free text, stripped; ``what`` says what it holds (path, URL...) for the README."""

    what: str = "text"
    expected = "text"

    @property
    def summary(self) -> str:
        return self.what

    def parse(self, raw: str) -> str:
        return raw.strip()

    def allows(self, value: object) -> bool:
        return isinstance(value, str)

    def shown(self, value: str) -> str:
        return value


Kind = Duration | Integer | Number | Boolean | Choice | Address | Text


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# ------------------------------------------------------------------ the declaration of one setting
@attrs.frozen
class Setting:
    """One setting: the variables it is read from (the first one set wins), its kind and its help.

    ``secret``: ``config`` prints ``***``; ``masks_credentials``: ``config`` masks a URL's userinfo
    and a Sentinel password.
    """

    env: tuple[str, ...]
    kind: Kind
    help: str
    secret: bool = False
    masks_credentials: bool = False

    @property
    def variable(self) -> str:
        return self.env[0]

    def read(self, environ: Mapping[str, str], default: Any) -> Any:
        """The value from ``environ`` (every variable set is checked; the first set wins), else ``default``.

        Raises:
            SettingsError: a set variable holds a value the kind does not accept (blank is unset).
        """
        found: list[Any] = []
        for name in self.env:
            raw = environ.get(name)
            if raw is None or raw.strip() == "":
                continue
            try:
                value = self.kind.parse(raw)
            except (TypeError, ValueError):
                raise SettingsError(f"{name}: expected {self.kind.expected}, got {raw!r}") from None
            if not self.kind.allows(value):
                raise SettingsError(f"{name}: expected {self.kind.expected}, got {raw!r}")
            found.append(value)
        return found[0] if found else default

    def check(self, value: Any) -> None:
        if not self.kind.allows(value):
            raise SettingsError(f"{self.variable}: expected {self.kind.expected}, got {value!r}")

    def shown(self, value: Any) -> str:
        """The value as ``ibex-context config`` prints it."""
        if self.secret and value:
            return "***"
        if self.masks_credentials and value:
            return _URL_SECRETS.sub("***", value)
        return str(value)

    def documented_default(self, default: Any) -> str:
        """The default as the README's table shows it."""
        return "empty" if default == "" else f"`{self.kind.shown(default)}`"


def setting(default: Any, *env: str, kind: Kind, help: str, secret: bool = False,
            masks_credentials: bool = False) -> Any:
    """A ``Settings`` field declared once: its variables, kind, default and help."""
    declared = Setting(env, kind, help, secret, masks_credentials)
    if not env or not declared.kind.allows(default):
        raise ValueError(f"bad declaration of {env}: default {default!r} must be a value it accepts")
    return attrs.field(default=default, validator=_validate, metadata={_DECLARATION: declared})


def _validate(_instance: object, attribute: attrs.Attribute, value: Any) -> None:
    attribute.metadata[_DECLARATION].check(value)


def _text(default: str, *env: str, what: str, help: str, **flags: bool) -> Any:
    return setting(default, *env, kind=Text(what), help=help, **flags)


def _ms(default: float, *env: str, help: str) -> Any:
    return setting(default, *env, kind=Duration(), help=help)


def _ms_or_off(default: float, *env: str, help: str) -> Any:
    return setting(default, *env, kind=Duration(zero_ok=True), help=help)


# ------------------------------------------------------------------ the settings
@attrs.frozen(kw_only=True)
class Settings:
    # listeners
    grpc_addr: str = setting(DEFAULT_GRPC_ADDR, "IBEX_CONTEXT_GRPC_ADDR", kind=Address(), help="gRPC bind address")
    http_addr: str = setting(DEFAULT_HTTP_ADDR, "IBEX_CONTEXT_HTTP_ADDR", kind=Address(),
                             help="HTTP JSON API + `/metrics`")
    http_read_timeout_ms: float = _ms(
        10_000.0, "IBEX_CONTEXT_HTTP_READ_TIMEOUT",
        help="HTTP: a request's headers must arrive within this of the connection opening (or the previous "
             "answer), then its body within this again; else 408 and the connection closes")
    http_max_connections: int = setting(
        512, "IBEX_CONTEXT_HTTP_MAX_CONNECTIONS", kind=Integer(1, 65_535),
        help="HTTP: open connections beyond this are answered 503 at once and closed")
    # retrieval: the wall, the branch budgets, the limits
    timeout_ms: float = _ms(
        45.0, "IBEX_CONTEXT_TIMEOUT", "IBEX_CONTEXT_TIMEOUT_MS",
        help="historical outer retrieval budget (`IBEX_CONTEXT_TIMEOUT_MS` is read when `IBEX_CONTEXT_TIMEOUT` "
             "is not set)")
    deadline_ms: float = _ms(
        40.0, "IBEX_CONTEXT_DEADLINE_MS",
        help="retrieval wall; the wall is `min(TIMEOUT, DEADLINE_MS)` and the caller's own deadline")
    directive_timeout_ms: float = _ms(5.0, "IBEX_CONTEXT_DIRECTIVE_TIMEOUT_MS", help="directive branch")
    hot_timeout_ms: float = _ms(15.0, "IBEX_CONTEXT_HOT_TIMEOUT_MS", help="hot memories branch")
    cold_timeout_ms: float = _ms(45.0, "IBEX_CONTEXT_COLD_TIMEOUT_MS",
                                 help="memory search branch, and each `SearchMemories` call")
    deadline_headroom_ms: float = _ms(
        10.0, "IBEX_CONTEXT_DEADLINE_HEADROOM_MS",
        help="kept back from a caller's gRPC deadline for packing and the answer: retrieval (and a "
             "`SearchMemories` call) ends this long before the deadline (10 ms: what scoring, packing and "
             "the answer take on a loaded 2-core process, docs/RELIABILITY.md)")
    hot_limit: int = setting(20, "IBEX_CONTEXT_HOT_LIMIT", kind=Integer(1, MAX_HOT_LIMIT),
                             help="hot memories asked for")
    cold_limit: int = setting(30, "IBEX_CONTEXT_COLD_LIMIT", kind=Integer(1, MAX_COLD_LIMIT),
                              help="search hits asked for (the reference asked 10)")
    min_confidence: float = setting(
        0.0, "IBEX_CONTEXT_MIN_CONFIDENCE", kind=Number(0.0, 1.0),
        help="hot memories and search hits below this confidence are not asked for (sent to the memory "
             "source as `min_confidence`)")
    # admission: what an assembly may wait for, and what it needs to start
    max_in_flight: int = setting(
        6, "IBEX_CONTEXT_MAX_IN_FLIGHT", kind=Integer(1, 10_000),
        help="assemblies run at once (both edges); a call finding all taken waits `ADMISSION_WAIT`, then "
             "is refused (gRPC RESOURCE_EXHAUSTED, HTTP 503 + `Retry-After`)")
    admission_wait_ms: float = _ms_or_off(
        15.0, "IBEX_CONTEXT_ADMISSION_WAIT",
        help="the longest a call waits for an assembly slot (never past its deadline less `BUSY_START_DEADLINE`)")
    min_start_deadline_ms: float = _ms_or_off(
        10.0, "IBEX_CONTEXT_MIN_START_DEADLINE",
        help="a gRPC call with less of its deadline left is refused at once (RESOURCE_EXHAUSTED) instead of "
             "started: it could not be answered in time")
    busy_start_deadline_ms: float = _ms_or_off(
        30.0, "IBEX_CONTEXT_BUSY_START_DEADLINE",
        help="while every slot is taken, a gRPC call with less of its deadline left is refused at once instead of "
             "waiting for one: what an assembly takes on a loaded process (at least `MIN_START_DEADLINE`)")
    # backends
    memory_base_url: str = _text("", "IBEX_CONTEXT_MEMORY_BASE_URL", what="`http://` or `https://` URL",
                                 help="memory service; **empty selects the embedded backend**")
    memory_api_token: str = _text("", "IBEX_CONTEXT_MEMORY_API_TOKEN", what="token", secret=True,
                                  help="Bearer token, required when the URL is set (never printed)")
    memory_max_body_bytes: int = setting(
        1 << 20, "IBEX_CONTEXT_MEMORY_MAX_BODY_BYTES", kind=Integer(4096, 64 << 20),
        help="memory service: a larger answer fails its branch (not read further, its connection closed); "
             "50 hot memories are about 30 KB, so 1 MiB leaves room for long ones")
    redis_url: str = _text(
        "", "IBEX_CONTEXT_REDIS_URL", what="Redis URL", masks_credentials=True,
        help="directive store; **empty selects the embedded backend**. `redis://`, `rediss://` (TLS: "
             "`?ssl_ca_certs=`, `ssl_certfile`, `ssl_keyfile`), `unix://`, or Sentinel: "
             "`redis+sentinel://[:password@]host:port,host:port/service_name/db[?sentinel_password=]` "
             "(`rediss+sentinel://` for TLS)")
    directive_cache_ttl_ms: float = _ms_or_off(
        1000.0, "IBEX_CONTEXT_DIRECTIVE_CACHE_TTL_MS",
        help="Redis directives: each answer (no directive too) is kept in process at most this long, dropped "
             "for its whole org on any message of `directive_updates:{org_id}`, and not used while that "
             "subscription is down; the longest a change written without a publish can go unseen. `0`: no "
             "cache and no subscription ([rules](docs/ARCHITECTURE.md#directive-cache))")
    directive_cache_entries: int = setting(
        10_000, "IBEX_CONTEXT_DIRECTIVE_CACHE_ENTRIES", kind=Integer(1, 1_000_000),
        help="Redis directives: the most agents' answers kept in process (least recently used dropped first)")
    data_path: str = _text(DEFAULT_DATA_PATH, "IBEX_CONTEXT_DATA_PATH", what="file path",
                           help="embedded backend file (SQLite, WAL)")
    catalog_path: str = _text("", "IBEX_CONTEXT_CATALOG_PATH", what="file path",
                              help="a catalog JSON (schema v1) replacing the built-in one; empty: the built-in one")
    # packing and formatting
    formatter_nonce_bytes: int = setting(16, "IBEX_CONTEXT_FORMATTER_NONCE_BYTES", kind=Integer(1, 64),
                                         help="nonce entropy")
    packer_dp_cell_ceiling: int = setting(
        70 * 6251, "IBEX_CONTEXT_PACKER_DP_CELL_CEILING", kind=Integer(1),
        help="accepted for compatibility (the reference's DP packer); unused: the exact packer needs no ceiling")
    packer_max_consecutive_skips: int = setting(
        5, "IBEX_CONTEXT_PACKER_MAX_CONSECUTIVE_SKIPS", kind=Integer(0),
        help="accepted for compatibility (the reference's DP packer); unused by the exact packer")
    # callers: TLS and signed principals
    tls_cert: str = _text("", "IBEX_CONTEXT_TLS_CERT", what="file path",
                          help="serve TLS (gRPC and HTTP): the certificate chain; set with `IBEX_CONTEXT_TLS_KEY`")
    tls_key: str = _text("", "IBEX_CONTEXT_TLS_KEY", what="file path",
                         help="the private key of `IBEX_CONTEXT_TLS_CERT`")
    tls_client_ca: str = _text("", "IBEX_CONTEXT_TLS_CLIENT_CA", what="file path",
                               help="set: client certificates required (mTLS)")
    principal_keys: str = _text("", "IBEX_CONTEXT_PRINCIPAL_KEYS", what="file path",
                                help="key file; set: every call needs a signed principal proof")
    principal_max_lifetime_ms: float = _ms(
        DEFAULT_PRINCIPAL_MAX_LIFETIME_MS, "IBEX_CONTEXT_PRINCIPAL_MAX_LIFETIME",
        help="longest validity window (`expires_at - issued_at`) a principal proof may have; longer: "
             "UNAUTHENTICATED / 401 `lifetime_too_long` ([why 1 h](docs/PRINCIPAL_PROOF.md#5-clock-rules))")
    allow_insecure_bind: bool = setting(
        False, "IBEX_CONTEXT_ALLOW_INSECURE_BIND", kind=Boolean(),
        help="allow a non-loopback bind with no authentication (warns at every start). Loopback means an IP "
             "address in 127.0.0.0/8 or `::1`, or a host name every address of which (resolved at start-up) "
             "is one: `127.example.invalid` is a name, and a name that does not resolve is not loopback")
    # deployment: a plaintext health-only listener, shutdown drain, connection age (docs/DEPLOYMENT.md)
    health_addr: str = setting(
        "", "IBEX_CONTEXT_HEALTH_ADDR", kind=Address(optional=True),
        help="a plaintext listener serving only `grpc.health.v1.Health` (for the kubelet's gRPC probes, which "
             "speak no TLS: [why](docs/DEPLOYMENT.md#probes)); empty: none")
    drain_delay_ms: float = _ms_or_off(
        0.0, "IBEX_CONTEXT_DRAIN_DELAY",
        help="on SIGTERM, health turns NOT_SERVING and calls are still served this long before the listeners "
             "stop (Kubernetes: `5s`)")
    shutdown_grace_ms: float = _ms_or_off(5000.0, "IBEX_CONTEXT_SHUTDOWN_GRACE",
                                          help="then in-flight calls get this long (`serve --grace` overrides)")
    max_connection_age_ms: float = _ms_or_off(
        30_000.0, "IBEX_CONTEXT_MAX_CONNECTION_AGE",
        help="a gRPC connection is sent GOAWAY after this (±10%), so clients re-resolve and find new replicas; "
             "`0`: never")
    max_connection_age_grace_ms: float = _ms_or_off(
        5000.0, "IBEX_CONTEXT_MAX_CONNECTION_AGE_GRACE",
        help="calls on an aged connection may finish for this long before it is closed")
    # the process
    log_level: str = setting(
        "INFO", "IBEX_CONTEXT_LOG_LEVEL", kind=Choice(LOG_LEVELS),
        help="JSON-lines logs on stderr; every record plain JSON (uvicorn's too: no `color_message`, no ANSI "
             "escapes)")
    event_loop: str = setting(
        "uvloop", "IBEX_CONTEXT_EVENT_LOOP", kind=Choice(EVENT_LOOPS),
        help="`serve`'s event loop: `uvloop` (libuv; about 5% less CPU per call under load) or `asyncio`")
    # selection: the score policy and relevance_v1's parameters (docs/PERFORMANCE.md, "Context quality")
    score_policy: str = setting(
        ScoreSchema.RELEVANCE, "IBEX_CONTEXT_SCORE_POLICY", kind=Choice(SCORE_POLICIES),
        help="selection when no request weight is > 0: `relevance_v1` or the reference's `interim_v1`")
    relevance_floor: float = setting(
        0.3, "IBEX_CONTEXT_RELEVANCE_FLOOR", kind=Number(0.0, 1.0),
        help="`relevance_v1`: candidates below this relevance (relative to the best) are left out")
    relevance_sharpness: float = setting(
        5.0, "IBEX_CONTEXT_RELEVANCE_SHARPNESS", kind=Number(1.0, 16.0),
        help="`relevance_v1`: utility = relevance^sharpness × confidence factor")
    hot_slots: int = setting(4, "IBEX_CONTEXT_HOT_SLOTS", kind=Integer(0, MAX_HOT_LIMIT),
                             help="`relevance_v1`: at most this many hot-only memories reach packing")
    core_slots: int = setting(
        2, "IBEX_CONTEXT_CORE_SLOTS", kind=Integer(0, MAX_HOT_LIMIT),
        help="`relevance_v1`: unrelated `preference`/`behavioral` hot memories kept as core facts")
    # tracing: the standard OpenTelemetry variables (README, Configuration); off without an endpoint
    otel_exporter_otlp_endpoint: str = _text(
        "", "OTEL_EXPORTER_OTLP_ENDPOINT", what="`http://` or `https://` URL", masks_credentials=True,
        help="collector base URL; over HTTP spans go to `<url>/v1/traces`; empty (and no traces endpoint): "
             "**tracing off**")
    otel_exporter_otlp_traces_endpoint: str = _text(
        "", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", what="`http://` or `https://` URL", masks_credentials=True,
        help="the traces URL itself (wins over the base one)")
    otel_exporter_otlp_protocol: str = setting(
        "http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL",
        kind=Choice(OTEL_PROTOCOLS), help="`http/protobuf` (port 4318) or `grpc` (4317); the traces one wins")
    otel_service_name: str = _text("ibex-context", "OTEL_SERVICE_NAME", what="text",
                                   help="the `service.name` resource attribute")
    otel_traces_sampler: str = setting("parentbased_always_on", "OTEL_TRACES_SAMPLER", kind=Choice(OTEL_SAMPLERS),
                                       help="which calls are traced")
    otel_traces_sampler_arg: float = setting(
        1.0, "OTEL_TRACES_SAMPLER_ARG", kind=Number(0.0, 1.0),
        help="the ratio of the `traceidratio` samplers (`0.01`: 1% of new traces)")
    otel_sdk_disabled: bool = setting(False, "OTEL_SDK_DISABLED", kind=Boolean(),
                                      help="`true`: tracing off whatever the endpoint")
    otel_traces_exporter: str = setting("otlp", "OTEL_TRACES_EXPORTER", kind=Choice(OTEL_EXPORTERS),
                                        help="`none`: tracing off")
    otel_bsp_max_queue_size: int = setting(
        2048, "OTEL_BSP_MAX_QUEUE_SIZE", kind=Integer(1, 1_000_000),
        help="spans waiting for export; a span ending at a full queue drops the oldest (counted)")
    otel_bsp_max_export_batch_size: int = setting(512, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", kind=Integer(1, 1_000_000),
                                                  help="spans per export request (at most the queue size)")
    otel_bsp_schedule_delay_ms: float = _ms(5000.0, "OTEL_BSP_SCHEDULE_DELAY",
                                            help="the longest a span waits before its batch is sent")
    otel_bsp_export_timeout_ms: float = _ms(30_000.0, "OTEL_BSP_EXPORT_TIMEOUT",
                                            help="accepted and passed to the SDK's batch processor")

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
        """Every declared setting from ``environ`` (blank or unset: the default).

        Raises:
            SettingsError: one line naming the variable and what it accepts.
        """
        settings = cls(**{field.name: declaration(field).read(environ, field.default) for field in attrs.fields(cls)})
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

    # -------------------------------------------------------------- what the use cases run with
    def relevance_policy(self) -> RelevancePolicy:
        """relevance_v1's parameters (its other constants are the domain's own)."""
        return RelevancePolicy(floor=self.relevance_floor, sharpness=self.relevance_sharpness,
                               hot_slots=self.hot_slots, core_slots=self.core_slots)

    def assembly_config(self, **overrides: Any) -> AssemblyConfig:
        """AssembleContext's configuration from these settings; ``overrides`` replace AssemblyConfig
        fields (seconds, as the domain counts): ``Settings().assembly_config(wall_s=0.1)``."""
        config = AssemblyConfig(
            wall_s=self.retrieval_wall_ms / 1000.0,
            directive_timeout_s=self.directive_timeout_ms / 1000.0,
            hot_timeout_s=self.hot_timeout_ms / 1000.0,
            cold_timeout_s=self.cold_timeout_ms / 1000.0,
            nonce_bytes=self.formatter_nonce_bytes,
            hot_limit=self.hot_limit,
            cold_limit=self.cold_limit,
            min_confidence=self.min_confidence,
            score_policy=ScoreSchema(self.score_policy),
            relevance=self.relevance_policy(),
            deadline_headroom_s=self.deadline_headroom_s,
        )
        return attrs.evolve(config, **overrides) if overrides else config

    def search_config(self) -> SearchConfig:
        """SearchMemories' configuration: the cold branch's budget and the deadline headroom."""
        return SearchConfig(timeout_s=self.cold_timeout_ms / 1000.0, deadline_headroom_s=self.deadline_headroom_s)

    # -------------------------------------------------------------- derived values
    @property
    def retrieval_wall_ms(self) -> float:
        return min(self.timeout_ms, self.deadline_ms)

    @property
    def deadline_headroom_s(self) -> float:
        return self.deadline_headroom_ms / 1000.0

    @property
    def http_read_timeout_s(self) -> float:
        return self.http_read_timeout_ms / 1000.0

    @property
    def directive_backend(self) -> str:
        """``redis`` when a Redis URL is set, else ``embedded`` (the composition root selects by it)."""
        return "embedded" if self.uses_embedded_directives else "redis"

    @property
    def memory_backend(self) -> str:
        """``http`` (the memory service) when its URL is set, else ``embedded``."""
        return "embedded" if self.uses_embedded_memory else "http"

    @property
    def uses_embedded_memory(self) -> bool:
        return not self.memory_base_url

    @property
    def uses_embedded_directives(self) -> bool:
        return not self.redis_url

    @property
    def uses_directive_cache(self) -> bool:
        """Redis directives go through the in-process cache (and its subscription): a TTL > 0."""
        return not self.uses_embedded_directives and self.directive_cache_ttl_ms > 0

    @property
    def directive_cache_ttl_s(self) -> float:
        return self.directive_cache_ttl_ms / 1000.0

    @property
    def has_auth(self) -> bool:
        return bool(self.tls_client_ca or self.principal_keys)

    @property
    def principal_max_lifetime(self) -> timedelta:
        """``IBEX_CONTEXT_PRINCIPAL_MAX_LIFETIME``: the longest validity window a principal proof may have."""
        return timedelta(milliseconds=self.principal_max_lifetime_ms)

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


# ------------------------------------------------------------------ reading the declarations
def declaration(field: attrs.Attribute) -> Setting:
    """The declaration of one ``Settings`` field."""
    return field.metadata[_DECLARATION]


def declared() -> Iterator[tuple[attrs.Attribute, Setting]]:
    """Every setting, in declaration order, with its field (name, default)."""
    for field in attrs.fields(Settings):
        yield field, declaration(field)


def effective_lines(settings: Settings) -> list[str]:
    """``name = value`` for every setting, as ``ibex-context config`` prints them (secrets masked)."""
    return [f"{field.name} = {setting.shown(getattr(settings, field.name))}" for field, setting in declared()]


def markdown_table(prefix: str) -> str:
    """The README's configuration table of the variables starting with ``prefix`` (``SERVICE_PREFIX``
    or ``TRACING_PREFIX``): one row per setting, from its declaration."""
    rows = ["| variable | default | accepts | meaning |", "|---|---|---|---|"]
    for field, setting in declared():
        if setting.variable.startswith(prefix):
            names = ", ".join(f"`{name}`" for name in setting.env)
            rows.append(f"| {names} | {setting.documented_default(field.default)} | {setting.kind.summary} "
                        f"| {setting.help} |")
    return "\n".join(rows)
