"""API key authentication (`Authorization: Bearer <key>`), per-key rate limiting, and the limit on
failed authentications per client address (app/limits.py FailedAuthLimiter)."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from worker.config.api_keys import key_hash
from worker.config.job_caps import JobCaps

bearer_scheme = HTTPBearer(auto_error=False, description="An API key from KERNELJUDGE_API_KEYS.")

OPEN_KEY_ID = "open"


@dataclass(frozen=True)
class Principal:
    key_id: str
    admin: bool
    caps: JobCaps = JobCaps()
    # Rules this key's jobs may not switch off in options.policy.disabled_rules (short ids;
    # worker/config/api_keys.py).
    required_rules: frozenset[str] = frozenset()

    def can_see(self, owner_key_id: str) -> bool:
        return self.admin or owner_key_id == self.key_id


def _too_many(message: str, retry_after: float) -> HTTPException:
    return HTTPException(429, message, headers={"Retry-After": str(max(1, int(retry_after + 0.999)))})


def _lookup(request: Request, raw_key: str | None) -> Principal:
    api = request.app.state.api
    if api.open_mode:
        return Principal(OPEN_KEY_ID, admin=True, caps=api.admin_job_caps,
                         required_rules=api.required_rules_of(None))
    failures = request.app.state.auth_failures
    address = failures.address_key(request.client.host if request.client else None)
    found = api.api_keys.get(key_hash(raw_key)) if raw_key else None
    refused = failures.refusal(address, found.key_id if found else None)
    if refused is not None:
        raise _too_many("too many failed authentications from this address; retry after the Retry-After delay "
                        "with a valid key", refused)
    if found is None:
        overloaded = failures.failed(address)
        if overloaded is not None:
            raise _too_many("too many failed authentications on this server; retry after the Retry-After delay",
                            overloaded)
        if not raw_key:
            raise HTTPException(401, "missing API key: send 'Authorization: Bearer <key>'",
                                headers={"WWW-Authenticate": "Bearer"})
        raise HTTPException(401, "invalid API key", headers={"WWW-Authenticate": "Bearer"})
    failures.succeeded(address, found.key_id)
    return Principal(found.key_id, found.admin, found.caps, api.required_rules_of(found))


def _rate_limit(request: Request, principal: Principal) -> None:
    retry_after = request.app.state.rate_limiter.acquire(principal.key_id)
    if retry_after is not None:
        raise _too_many("rate limit exceeded for this API key; retry after the Retry-After delay", retry_after)


async def authenticate(request: Request,
                 credentials: HTTPAuthorizationCredentials | None = Depends(bearer_scheme)) -> Principal:
    principal = _lookup(request, credentials.credentials if credentials else None)
    _rate_limit(request, principal)
    return principal


async def authenticate_bearer_or_query(request: Request, key: str | None = None,
                                 credentials: HTTPAuthorizationCredentials | None = Depends(bearer_scheme)
                                 ) -> Principal:
    """For trainers that cannot send headers (OpenRLHF's remote reward): `?key=` also works."""
    raw = credentials.credentials if credentials else key
    principal = _lookup(request, raw)
    _rate_limit(request, principal)
    return principal
