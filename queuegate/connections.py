"""Redis connections by URL: one server (``redis://``, ``rediss://``,
``unix://``), a Cluster (``redis+cluster://``) or a master behind Sentinel
(``redis+sentinel://``), each with TLS as ``rediss``. A URL of any other kind
is a ``ConfigError`` naming the schemes there are.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff

from .settings import ConfigError

__all__ = ["Client", "connect", "redacted"]

URL = "the Redis URL (redis=, QUEUEGATE_REDIS_URL)"  # as the errors name it


def redacted(url: str) -> str:
    """A Redis URL fit for logs and messages: any password is masked."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


Client = aioredis.Redis | aioredis.RedisCluster


def connect(url: str, timeout: float, max_connections: int = 50, *, setting: str = URL) -> Client:
    """A client for ``redis://``, ``rediss://``, ``unix://`` or
    ``redis+cluster://`` (``rediss+cluster://``) URLs.

    Connecting is bounded by ``timeout``; one immediate retry covers a pooled
    connection that died with a Redis restart. At most ``max_connections``
    are open; a request that finds them all busy waits for one (within the
    caller's timeout) instead of failing. A cluster URL names any one node;
    the others are discovered. A wrong URL's error names it as ``setting``.
    """
    scheme = url.split("://", 1)[0]
    if scheme in ("redis+sentinel", "rediss+sentinel"):
        return _sentinel_client(url, timeout, max_connections, setting)
    if scheme in ("redis+cluster", "rediss+cluster"):
        try:
            cluster = aioredis.RedisCluster.from_url(
                url.replace("+cluster", "", 1),
                socket_timeout=max(1.0, 4 * timeout),
                socket_connect_timeout=timeout,
                max_connections=max_connections,
            )
        except ValueError as exc:
            raise ConfigError(f"{setting} is not valid: {exc}") from None
        return cluster
    if scheme not in ("redis", "rediss", "unix"):
        raise ConfigError(
            f"{setting} must start with redis://, rediss://, unix://, redis+cluster:// or "
            f"redis+sentinel:// (rediss+ for TLS), got {scheme!r}"
        )
    try:
        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            max_connections=max_connections,
            timeout=timeout,
            # A request waits at most `timeout` (the gate's own deadline); a
            # connection is only given up when silent for longer, since on a
            # shared pipelined connection one read waits for the replies ahead.
            socket_timeout=max(1.0, 4 * timeout),
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 1),
        )
    except ValueError as exc:
        raise ConfigError(f"{setting} is not valid: {exc}") from None
    # from_pool: closing the client closes the pool and its connections.
    return aioredis.Redis.from_pool(pool)


def _sentinel_client(url: str, timeout: float, max_connections: int, setting: str) -> aioredis.Redis:
    """``redis+sentinel://[[user]:password@]host:port[,host:port...]/master[/db]``
    (``rediss+sentinel://`` for TLS to the sentinels and the master). Query
    arguments: ``sentinel_password`` (and ``sentinel_username``) for the
    sentinels, ``ssl_ca_certs``, ``ssl_certfile``, ``ssl_keyfile``,
    ``ssl_cert_reqs`` for TLS. Each new connection asks the sentinels where
    the master is, so after a failover the next connection goes to the new
    one."""
    parts = urlsplit(url)
    hosts: list[tuple[str, int]] = []
    try:
        for item in parts.netloc.rpartition("@")[2].split(","):
            host, colon, port = item.rpartition(":")
            hosts.append((host, int(port)) if colon else (item, 26379))
        names = [unquote(part) for part in parts.path.split("/") if part]
        db = int(names[1]) if len(names) > 1 else 0
    except ValueError as exc:
        raise ConfigError(f"{setting} is not a valid redis+sentinel:// URL: {exc}") from None
    if not names or not all(host for host, _ in hosts):
        raise ConfigError(
            f"{setting}: a sentinel URL names the sentinels and the master, like "
            "redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster"
        )
    query = dict(parse_qsl(parts.query))
    common: dict[str, Any] = {"socket_timeout": max(1.0, 4 * timeout), "socket_connect_timeout": timeout}
    if parts.scheme.startswith("rediss"):
        common["ssl"] = True
        for name in ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs"):
            if name in query:
                common[name] = query.pop(name)
    sentinel_auth = {
        "password": query.pop("sentinel_password", None),
        "username": query.pop("sentinel_username", None),
    }
    if query:
        raise ConfigError(f"{setting}: unknown sentinel URL argument(s) {', '.join(sorted(query))}")
    sentinel = Sentinel(  # type: ignore[no-untyped-call]
        hosts,
        sentinel_kwargs={**common, **{k: v for k, v in sentinel_auth.items() if v is not None}},
        **common,
    )
    password = None if parts.password is None else unquote(parts.password)
    username = None if not parts.username else unquote(parts.username)
    master: aioredis.Redis = sentinel.master_for(
        names[0], password=password, username=username, db=db, max_connections=max_connections
    )
    return master
