"""Client addresses: who is asking, for the per-client limit on new places
and for bypass networks; and the scheme the client used, for cookies'
``Secure`` flag.

Behind ``trusted_proxies`` the client is the last address in
X-Forwarded-For that is not a proxy's. An IPv4 client seen as an
IPv4-mapped IPv6 address (``::ffff:192.0.2.1``, dual-stack sockets) is that
IPv4 address; another IPv6 client counts as its /64 (one household's or
phone's whole range). Parsing addresses costs more than the rest of an
admitted request's own work, so answers are cached, with bounded keys: a
hostile header cannot grow a worker's memory.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from functools import lru_cache
from typing import NamedTuple

from starlette.types import Scope

__all__ = ["ClientAddresses"]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

MAX_CACHED_FORWARDED = 256  # bytes of X-Forwarded-For whose answer is cached
MAX_HOP = 64  # characters: no address is longer (the longest IPv6 text is 45)


def _address(text: str) -> Address | None:
    if len(text) > MAX_HOP:
        return None
    # Most hops are IPv4 in canonical form: the C parser reads those in a
    # quarter of the time (every new visitor's address is parsed once).
    try:
        packed = socket.inet_pton(socket.AF_INET, text)
    except OSError:
        pass
    else:
        if socket.inet_ntop(socket.AF_INET, packed) == text:
            return ipaddress.IPv4Address(packed)
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if address.version == 6 and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


class _Hop(NamedTuple):
    address: bool  # False: not an address
    trusted: bool  # a trusted proxy's
    key: str  # the client it stands for: the address, or an IPv6 address's /64


_NO_HOP = _Hop(False, False, "unknown")


class ClientAddresses:
    def __init__(self, trusted_proxies: Sequence[str]) -> None:
        self._trusted = [ipaddress.ip_network(n, strict=False) for n in trusted_proxies]
        # The IPv4 ones as (network, mask) integers: a hop in canonical IPv4
        # (nearly every new visitor's) is checked without an address object,
        # a third of the client key's cost for a newcomer.
        self._trusted_v4 = [(int(n.network_address), int(n.netmask)) for n in self._trusted if n.version == 4]
        self._resolve_cached = lru_cache(maxsize=65_536)(self._resolve)
        self._hop = lru_cache(maxsize=4096)(self._parse_hop)
        self._peer = lru_cache(maxsize=4096)(_address)

    def peer(self, scope: Scope) -> Address | None:
        """The address the server reports for the connection."""
        client = scope.get("client")
        if not client:
            return None
        text = str(client[0])
        return None if len(text) > MAX_HOP else self._peer(text)

    def scheme(self, scope: Scope) -> str:
        """The scheme the client used: the server's (``scope["scheme"]``), or,
        when the connection comes from a trusted proxy, the first value of its
        ``X-Forwarded-Proto`` (what the client used to reach the first proxy).
        A client can only misstate its own scheme."""
        scheme = str(scope.get("scheme") or ("ws" if scope["type"] == "websocket" else "http"))
        client = scope.get("client")
        if self._trusted and client and self._hop_of(str(client[0])).trusted:
            for name, value in scope["headers"]:
                if name == b"x-forwarded-proto":
                    scheme = value.split(b",", 1)[0].strip().decode("latin-1").lower()
        return scheme

    def _hop_of(self, text: str) -> _Hop:
        # Only what could be an address reaches the cache.
        return _NO_HOP if len(text) > MAX_HOP else self._hop(text)

    def __call__(self, scope: Scope) -> str:
        """The client, as a key for the per-client limit."""
        peer = (scope.get("client") or ("", 0))[0]
        forwarded = None
        if self._trusted:
            for name, value in scope["headers"]:
                if name == b"x-forwarded-for":
                    forwarded = value
        if forwarded is not None and len(forwarded) > MAX_CACHED_FORWARDED:
            return self._resolve(peer, forwarded)
        return self._resolve_cached(peer, forwarded)

    def _resolve(self, peer: str, forwarded: bytes | None) -> str:
        if forwarded is None:
            return self._hop_of(peer.strip()).key
        if b"," not in forwarded:
            # One hop behind the peer (one proxy's header, the usual case): the
            # client when the peer is a trusted proxy and the hop an address,
            # trusted or not (nothing further is read). Most are new visitors'
            # canonical IPv4 addresses, their own keys: checked here, without
            # the hops' cache that each new one only churns.
            last = self._hop_of(peer.strip())
            if not last.trusted:
                return last.key
            hop = forwarded.decode("latin-1").strip()
            try:
                canonical = socket.inet_ntop(socket.AF_INET, socket.inet_pton(socket.AF_INET, hop)) == hop
            except OSError:
                canonical = False
            if canonical:
                return hop
            found = self._hop_of(hop)
            return found.key if found.address else last.key
        found = _NO_HOP
        for hop in reversed([*forwarded.decode("latin-1").split(","), peer]):
            parsed = self._hop_of(hop.strip())
            if not parsed.address:
                break
            found = parsed
            if not parsed.trusted:
                break
        return found.key

    def network(self, scope: Scope) -> str:
        """The client's coarse network, for cookies bound to clients: its /24
        (IPv4) or /48 (IPv6), which a phone keeps while its address changes
        within its carrier's range more often than not."""
        return self._network(self(scope))

    @staticmethod
    @lru_cache(maxsize=65_536)
    def _network(client: str) -> str:
        if client == "unknown":
            return client
        prefix = 48 if ":" in client else 24
        return str(ipaddress.ip_network(f"{client.split('/')[0]}/{prefix}", strict=False))

    def _parse_hop(self, text: str) -> _Hop:
        """An address, whether it is a trusted proxy's, and the client key it
        stands for (made once per address, with its parse)."""
        try:
            packed = socket.inet_pton(socket.AF_INET, text)
        except OSError:
            pass
        else:
            if socket.inet_ntop(socket.AF_INET, packed) == text:  # canonical: the key is the text
                value = int.from_bytes(packed, "big")
                trusted = False
                for network, mask in self._trusted_v4:
                    if (value & mask) == network:
                        trusted = True
                        break
                return _Hop(True, trusted, text)
        address = _address(text)
        if address is None:
            return _NO_HOP
        trusted = any(address in network for network in self._trusted)
        if address.version == 6:
            key = str(ipaddress.ip_network(f"{address}/64", strict=False).network_address) + "/64"
        elif ":" in text:  # an IPv4-mapped IPv6 address
            key = str(address)
        else:  # IPv4 as the parsers take it: only in its canonical form
            key = text
        return _Hop(True, trusted, key)
