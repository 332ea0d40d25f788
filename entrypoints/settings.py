"""Settings: the only place the process environment is read.

``Settings.from_env(environ)`` parses every ``IBEX_CONTEXT_*`` variable into a frozen value; a bad
value raises ``SettingsError`` whose message is one line naming the variable and what it accepts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import attrs

from domain.model.assembly import SCORE_POLICIES, SCORE_SCHEMA_RELEVANCE
from domain.relevance_policy import RelevancePolicy

DEFAULT_GRPC_ADDR = "127.0.0.1:9092"
DEFAULT_HTTP_ADDR = "127.0.0.1:9093"
DEFAULT_DATA_PATH = "./.ibex-context/ibex.db"
MAX_HOT_LIMIT = 50  # the memory service's bound for GET /v1/memories/hot
MAX_COLD_LIMIT = 100  # and for POST /v1/memories/search
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
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
    """True when a ``host:port`` bind address is a loopback address."""
    host = addr.rsplit(":", 1)[0].strip().lower().strip("[]")
    return host in LOOPBACK_HOSTS or host.startswith("127.")


EVENT_LOOPS = ("uvloop", "asyncio")
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
    allow_insecure_bind: bool = False
    log_level: str = "INFO"
    event_loop: str = "uvloop"
    score_policy: str = SCORE_SCHEMA_RELEVANCE
    relevance_floor: float = _RELEVANCE.floor
    relevance_sharpness: float = _RELEVANCE.sharpness
    hot_slots: int = _RELEVANCE.hot_slots
    core_slots: int = _RELEVANCE.core_slots

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
            allow_insecure_bind=reader.boolean("IBEX_CONTEXT_ALLOW_INSECURE_BIND"),
            log_level=reader.choice("IBEX_CONTEXT_LOG_LEVEL", "INFO", ("DEBUG", "INFO", "WARNING", "ERROR")),
            event_loop=reader.choice("IBEX_CONTEXT_EVENT_LOOP", "uvloop", EVENT_LOOPS),
            score_policy=reader.choice("IBEX_CONTEXT_SCORE_POLICY", SCORE_SCHEMA_RELEVANCE, SCORE_POLICIES),
            relevance_floor=reader.number("IBEX_CONTEXT_RELEVANCE_FLOOR", _RELEVANCE.floor, 0.0, 1.0),
            relevance_sharpness=reader.number("IBEX_CONTEXT_RELEVANCE_SHARPNESS", _RELEVANCE.sharpness, 1.0, 16.0),
            hot_slots=reader.integer("IBEX_CONTEXT_HOT_SLOTS", _RELEVANCE.hot_slots, 0, MAX_HOT_LIMIT),
            core_slots=reader.integer("IBEX_CONTEXT_CORE_SLOTS", _RELEVANCE.core_slots, 0, MAX_HOT_LIMIT),
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
