"""``redis+sentinel://`` URLs: parsing, defaults, TLS options and errors that never show a secret."""

from __future__ import annotations

import re

import pytest

from adapters.redis_directive_store import (
    DEFAULT_SENTINEL_PORT, RedisDirectiveStore, SentinelUrl, is_sentinel_url, parse_sentinel_url,
)


def test_hosts_service_db_and_credentials() -> None:
    parsed = parse_sentinel_url("redis+sentinel://app:p%40ss@s-0.redis:26380,s-1.redis,[::1]:26381/mymaster/2"
                                "?sentinel_password=sp&sentinel_username=watcher")
    assert parsed == SentinelUrl(
        sentinels=(("s-0.redis", 26380), ("s-1.redis", DEFAULT_SENTINEL_PORT), ("::1", 26381)),
        service_name="mymaster", db=2, username="app", password="p@ss",
        sentinel_username="watcher", sentinel_password="sp", tls=False, tls_options={},
    )
    assert "p@ss" not in repr(parsed) and "sp'" not in repr(parsed)


def test_defaults_db_0_and_no_credentials() -> None:
    parsed = parse_sentinel_url("redis+sentinel://127.0.0.1:26379/svc")
    assert (parsed.db, parsed.username, parsed.password, parsed.sentinel_password) == (0, None, None, None)


def test_password_only_userinfo() -> None:
    parsed = parse_sentinel_url("redis+sentinel://:secret@h/svc/0")
    assert (parsed.username, parsed.password) == (None, "secret")


def test_tls_scheme_and_options() -> None:
    parsed = parse_sentinel_url("rediss+sentinel://h:1/svc/0?ssl_ca_certs=/ca.crt&ssl_certfile=/c.crt"
                                "&ssl_keyfile=/c.key&ssl_check_hostname=false")
    assert parsed.tls
    assert parsed.tls_options == {"ssl_ca_certs": "/ca.crt", "ssl_certfile": "/c.crt", "ssl_keyfile": "/c.key",
                                  "ssl_check_hostname": False}


@pytest.mark.parametrize("url, message", [
    ("redis+sentinel://:hunter2@h:1", "names the monitored service"),
    ("redis+sentinel://:hunter2@h:1/", "names the monitored service"),
    ("redis+sentinel://:hunter2@h:1/svc/zero", "db a number"),
    ("redis+sentinel://:hunter2@h:1/svc/0/extra", "db a number"),
    ("redis+sentinel://:hunter2@h:99999/svc", "port must be 1..65535"),
    ("redis+sentinel://:hunter2@h:1,,h:2/svc", "none empty"),
    ("redis+sentinel://:hunter2@h:1/svc?password=hunter2", "unknown Sentinel URL option 'password'"),
    ("redis+sentinel://:hunter2@h:1/svc?ssl_ca_certs=/ca", "TLS options need rediss+sentinel://"),
])
def test_errors_say_what_is_wrong_and_never_show_the_password(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)) as excinfo:
        parse_sentinel_url(url)
    assert "hunter2" not in str(excinfo.value)


def test_only_sentinel_schemes_are_sentinel_urls() -> None:
    assert is_sentinel_url("redis+sentinel://h/svc") and is_sentinel_url("REDISS+SENTINEL://h/svc")
    assert not is_sentinel_url("redis://h:6379/0") and not is_sentinel_url("rediss://h:6380/0")


async def test_from_url_builds_a_bounded_sentinel_pool_without_connecting() -> None:
    store = RedisDirectiveStore.from_url("redis+sentinel://127.0.0.1:1/svc/3", socket_timeout_s=0.05,
                                         connect_timeout_s=0.05, max_connections=7)
    pool = store._client.connection_pool
    try:
        assert pool.service_name == "svc" and pool.max_connections == 7 and pool.timeout == 0.05
        assert pool.connection_kwargs["db"] == 3 and pool.connection_kwargs["socket_timeout"] == 0.05
        assert pool.connection_kwargs["retry"].get_retries() == 0
    finally:
        await store.close()
