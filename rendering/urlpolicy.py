"""Where a ``url`` template may be fetched from: the operator's policy and the pure checks it drives.

A template URL is written by a plan author but fetched by the controller, from inside the cluster. Left open it
reads the cloud's metadata service (169.254.169.254), the API server or any in-cluster Service on the plan's
behalf. So only globally routable addresses are fetched from, unless the operator allows a network by name
(:attr:`FetchPolicy.allowed_networks`, e.g. the in-cluster Service that serves the catalog's templates), and a
redirect never changes the scheme. Everything here is pure; :mod:`.fetching` does the I/O.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

#: Status codes whose ``Location`` the fetcher follows.
REDIRECTS = frozenset({301, 302, 303, 307, 308})


@dataclass(frozen=True)
class FetchPolicy:
    """How the controller fetches template URLs; set by the operator (``opbroker controller run`` flags).

    ``allowed_networks`` may be fetched from although they are not globally routable (loopback, link-local,
    private, ...); ``proxy`` (an ``http://`` URL) is the one proxy used — the ``*_PROXY`` environment variables
    are never read, so a variable meant for other software cannot reroute templates; ``max_redirects`` bounds a
    redirect chain.
    """

    allowed_networks: tuple[Network, ...] = ()
    proxy: str | None = None
    max_redirects: int = 5

    @classmethod
    def from_flags(cls, networks: Iterable[str] = (), proxy: str | None = None) -> FetchPolicy:
        """A policy from CIDR strings (``10.96.0.0/12``, ``fd00::/8``, a bare address) and a proxy URL.

        Raises ValueError naming the bad value.
        """
        parsed = []
        for network in networks:
            try:
                parsed.append(ipaddress.ip_network(network.strip(), strict=False))
            except ValueError:
                raise ValueError(f"{network!r} is not an IP network (CIDR such as 10.96.0.0/12)") from None
        if proxy is not None and urlsplit(proxy).scheme not in ("http", "https"):
            raise ValueError(f"{proxy!r} is not an http:// or https:// proxy URL")
        return cls(allowed_networks=tuple(parsed), proxy=proxy)


def kind(address: Address) -> str | None:
    """What makes ``address`` unfit to fetch from (``"loopback"``, ``"link-local"``, ...), or None if public."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    checks = (
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("unspecified", address.is_unspecified),
        ("multicast", address.is_multicast),
        ("private", address.is_private),
        ("reserved", address.is_reserved),
        ("non-public", not address.is_global),
    )
    return next((name for name, hit in checks if hit), None)


#: Appended to every refusal: what an operator does when the address is meant.
HINT = "(an operator allows its network with --template-allow-network)"


def refusal(address: str, policy: FetchPolicy) -> str | None:
    """Why the fetcher may not connect to ``address`` (an IP literal), e.g. "a loopback address"; None if it may."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # an IPv6 link-local address may carry a zone
    if any(ip in network for network in policy.allowed_networks):
        return None
    reason = kind(ip)
    return f"a {reason} address" if reason is not None else None


def literal_refusal(host: str, policy: FetchPolicy) -> str | None:
    """The full refusal for a host that is a forbidden IP literal; None for an allowed one or for a name."""
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None
    reason = refusal(host, policy)
    return f"refused: {host} is {reason} {HINT}" if reason is not None else None


def redirect_target(current: str, location: str | None, scheme: str) -> str:
    """The absolute URL a redirect from ``current`` leads to; ValueError if it has none or leaves ``scheme``."""
    if not location:
        raise ValueError(f"a redirect from {current} without a Location")
    target = urljoin(current, location.strip())
    if urlsplit(target).scheme != scheme:
        raise ValueError(f"a redirect from {current} to {target} leaves {scheme}: refused")
    return target
