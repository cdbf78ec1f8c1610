"""Where a callback may go: checked after DNS resolution, at send time, and connected to as checked.

A callback is a POST the service makes on a client's behalf, signed with the server's secret and
carrying the job's JSON. Without this check a client could point it at the service's own loopback,
at the cloud metadata address (169.254.169.254) or into the private network behind it (SSRF).

Refused: loopback, private, shared (100.64/10), link-local, multicast, reserved, unspecified and
other non-global addresses, IPv4 and IPv6, including IPv4 carried inside IPv6 (mapped, 6to4,
NAT64). Every address a name resolves to must pass, and the connection goes to the address that
was checked (the URL's name is kept for the Host header and TLS), so a name that resolves
differently the next time (DNS rebinding) gains nothing. Host forms such as 2130706433, 0x7f.1 or
0177.0.0.1 are resolved by the system resolver like any name, so they are checked as the address
they mean. KERNELJUDGE_CALLBACK_ALLOW names what may still be reached (hosts and CIDRs).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], list[str]]

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


class CallbackRefused(ValueError):
    """The callback URL may not be used. `final`: trying again cannot help (unlike a DNS failure)."""

    def __init__(self, reason: str, *, final: bool = True):
        super().__init__(reason)
        self.final = final


@dataclass(frozen=True)
class CallbackAllowList:
    """Destinations allowed even though they are not public: CIDRs/addresses, and host names
    (a listed name is trusted whatever it resolves to: its DNS is the operator's)."""

    networks: tuple[IpNetwork, ...] = ()
    hosts: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def parse(cls, text: str) -> CallbackAllowList:
        """Comma- or space-separated entries: `10.0.0.0/8`, `127.0.0.1`, `::1`, `hooks.internal`."""
        networks: list[IpNetwork] = []
        hosts: set[str] = set()
        for entry in text.replace(",", " ").split():
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
            except ValueError:
                name = entry.lower().rstrip(".")
                if not name or any(c in name for c in "/:@?#"):
                    raise ValueError(f"KERNELJUDGE_CALLBACK_ALLOW: {entry!r} is neither a host name nor an "
                                     "address or CIDR") from None
                hosts.add(name)
        return cls(tuple(networks), frozenset(hosts))

    def allows_address(self, address: IpAddress) -> bool:
        return any(address in network for network in self.networks if network.version == address.version)


def forbidden_reason(address: IpAddress) -> str | None:
    """Why the service must not send to this address; None for a public (globally routable) one."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            reason = forbidden_reason(embedded)
            return f"{reason} (IPv4 {embedded} inside IPv6)" if reason else None
    checks = (("the unspecified address", address.is_unspecified), ("a loopback address", address.is_loopback),
              ("a link-local address (where cloud metadata services answer)", address.is_link_local),
              ("a multicast address", address.is_multicast), ("a private address", address.is_private),
              ("a reserved address", address.is_reserved),
              ("a site-local address", getattr(address, "is_site_local", False)),
              ("not a globally routable address", not address.is_global))
    return next((name for name, hit in checks if hit), None)


def system_resolver(host: str, port: int) -> list[str]:
    """Every address the system resolver gives for `host` (literals in any form included)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise CallbackRefused(f"callback host {host!r} does not resolve: {exc}", final=False) from None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass(frozen=True)
class Destination:
    """A checked callback target: connect to `url` (the checked address) and send `host` as the Host
    header and, for https, as the TLS server name (certificates are verified against it)."""

    url: httpx.URL
    host: str
    sni_hostname: str | None
    address: str


def check_destination(url: str, allow: CallbackAllowList, resolve: Resolver = system_resolver) -> Destination:
    """The address to POST `url` to, or CallbackRefused saying why it may not be used."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError) as exc:
        raise CallbackRefused(f"callback_url is not a valid URL: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.raw_host:
        raise CallbackRefused("callback_url must be an http:// or https:// URL with a host")
    name = parsed.raw_host.decode("ascii").lower().rstrip(".")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    addresses = resolve(name, port)
    if not addresses:
        raise CallbackRefused(f"callback host {name!r} does not resolve", final=False)
    if name not in allow.hosts:
        for text in addresses:
            address = ipaddress.ip_address(text.split("%", 1)[0])  # drop an IPv6 zone ("fe80::1%eth0")
            reason = None if allow.allows_address(address) else forbidden_reason(address)
            if reason is not None:
                shown = name if _is_address(name) else f"{name} resolves to {address}, which"
                raise CallbackRefused(
                    f"callback_url refused: {shown} is {reason}; callbacks go to public addresses "
                    "only, unless the server's KERNELJUDGE_CALLBACK_ALLOW names the host or network")
    chosen = addresses[0]
    literal = _is_address(name)
    return Destination(url=parsed.copy_with(host=chosen), host=parsed.netloc.decode("ascii"),
                       sni_hostname=name if parsed.scheme == "https" and not literal else None, address=chosen)


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
