"""Failed authentication is rate-limited per client address (429 with Retry-After), with a global
backstop, and an attacker's failures never lock a real key out from another address."""

from __future__ import annotations

import httpx

from app.limits import FailedAuthLimiter, RateLimiter
from service.helpers import OTHER_KEY, USER_KEY

BURST = 5


def _client(live, key: str | None, source: str = "127.0.0.1") -> httpx.Client:
    """A client whose connections come from `source` (any 127.x address is this host's loopback)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(base_url=live.base_url, headers=headers, timeout=60,
                        transport=httpx.HTTPTransport(local_address=source))


def test_a_flood_of_bad_keys_from_one_address_gets_429_and_real_keys_keep_working(serve):
    # The failure budget refills about never during the test: what is spent stays spent.
    live = serve(auth_fail_rate_per_s=0.001, auth_fail_burst=BURST, auth_fail_global_rate_per_s=1000)
    with _client(live, OTHER_KEY, "127.0.0.2") as colleague:  # works from the attacker's address (one NAT)
        assert colleague.get("/v1/dashboard/session").status_code == 200
    with _client(live, "guess", "127.0.0.2") as attacker:
        statuses = [attacker.get("/v1/dashboard/session").status_code for _ in range(BURST + 3)]
        limited = attacker.get("/v1/dashboard/session")
    assert statuses == [401] * BURST + [429] * 3
    assert limited.status_code == 429 and int(limited.headers["Retry-After"]) >= 1
    assert "failed authentications from this address" in limited.json()["detail"]
    # From the blocked address a right guess looks like a wrong one (guessing stays slow)...
    with _client(live, USER_KEY, "127.0.0.2") as guessed:
        assert guessed.get("/v1/dashboard/session").status_code == 429
    # ...a key that already worked from there keeps working, and every other address is untouched.
    with _client(live, OTHER_KEY, "127.0.0.2") as colleague:
        assert colleague.get("/v1/dashboard/session").status_code == 200
    with _client(live, USER_KEY, "127.0.0.3") as real:
        assert real.get("/v1/dashboard/session").status_code == 200
    with _client(live, "typo", "127.0.0.4") as newcomer:
        assert newcomer.get("/v1/dashboard/session").status_code == 401


def test_missing_keys_count_as_failures_too(serve):
    live = serve(auth_fail_rate_per_s=0.001, auth_fail_burst=2, auth_fail_global_rate_per_s=1000)
    with _client(live, None, "127.0.0.5") as anonymous:
        assert [anonymous.post("/v1/problems", json={}).status_code for _ in range(3)] == [401, 401, 429]


def test_the_global_backstop_refuses_failures_but_never_a_valid_key(serve):
    # Global budget: 10 failures (burst = 10 x rate), then none; each address could do 1000.
    live = serve(auth_fail_rate_per_s=1000, auth_fail_burst=1000, auth_fail_global_rate_per_s=0.001)
    statuses = []
    for host in range(10, 22):  # twelve addresses, one failure each
        with _client(live, "guess", f"127.0.0.{host}") as client:
            statuses.append(client.get("/v1/dashboard/session").status_code)
    assert statuses == [401] * 10 + [429] * 2
    with _client(live, USER_KEY, "127.0.0.30") as real:
        assert real.get("/v1/dashboard/session").status_code == 200


def test_ipv6_clients_count_per_64_and_ipv4_mapped_as_ipv4():
    key = FailedAuthLimiter.address_key
    assert key("2001:db8:1:2:aaaa::1") == key("2001:db8:1:2:bbbb::2") == "2001:db8:1:2::/64"
    assert key("2001:db8:1:3::1") != key("2001:db8:1:2::1")
    assert key("::ffff:192.0.2.7") == key("192.0.2.7") == "192.0.2.7"
    assert key(None) == "unknown"


def test_the_known_key_table_stays_bounded():
    limiter = FailedAuthLimiter(rate=0.001, burst=1, global_rate=1000, max_known=3)
    for n in range(5):
        limiter.succeeded(f"10.0.0.{n}", "key")
    limiter.failed("10.0.0.0")
    limiter.failed("10.0.0.4")
    assert limiter.refusal("10.0.0.0", "key") is not None  # forgotten: the oldest went first
    assert limiter.refusal("10.0.0.4", "key") is None


def test_the_bucket_table_stays_bounded():
    limiter = RateLimiter(rate=0.001, burst=1, max_keys=100)
    for n in range(1000):  # an attacker inventing addresses
        limiter.acquire(f"10.0.{n // 256}.{n % 256}")
    assert len(limiter._buckets) <= 101
    assert limiter.peek("10.0.3.231") is not None  # the latest ones are still counted
