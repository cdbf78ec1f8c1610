"""/v1/problems, /v1/health, /v1/ready and /metrics."""

from __future__ import annotations

import asyncio
import logging

from fastapi import APIRouter, Depends, HTTPException, Path, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import ValidationError

from app.auth import Principal, authenticate
from app.schemas import (
    PROBLEM_ID_PATTERN,
    Health,
    ItemError,
    LaneReadiness,
    ProblemBatchCreate,
    ProblemBatchItem,
    ProblemBatchResponse,
    ProblemCreate,
    ProblemView,
    Readiness,
)
from app.views import clean_errors, not_found
from worker.jobs.store import Problem
from worker.jobs.store.records import iso_time

log = logging.getLogger(__name__)

router = APIRouter()


def _problem_view(problem: Problem, principal: Principal, note: str | None = None) -> ProblemView:
    return ProblemView(id=problem.id, name=problem.name, created_at=iso_time(problem.created_at) or "",
                       reference=problem.reference, profile=problem.profile or "partial",
                       degenerate_reference=problem.degenerate_reference,
                       registered_by_you=problem.owner_key_id == principal.key_id, note=note)


def _registration_note(body: ProblemCreate, problem: Problem, created: bool, principal: Principal) -> str | None:
    """What a registration of an existing problem by a key that does not own it did not change."""
    if created or problem.owner_key_id == principal.key_id:
        return None
    kept = []
    if body.name is not None and body.name != problem.name:
        kept.append("its name is kept (only its owner or an admin key renames it)")
    if body.profile is not None:
        kept.append(f"profile {body.profile!r} is yours: it applies to this key's jobs only")
    if not kept:
        return None
    return "this reference was registered before by another API key or the operator, whose settings are " \
           "unchanged: " + "; ".join(kept)


def _register(store, body: ProblemCreate, principal: Principal) -> tuple[ProblemView, bool]:
    problem, created = store.put_problem(body.reference, body.name, body.profile, key_id=principal.key_id,
                                         admin=principal.admin)
    return _problem_view(problem, principal, _registration_note(body, problem, created, principal)), created


@router.post("/v1/problems", response_model=ProblemView, status_code=201, tags=["problems"],
             responses={200: {"model": ProblemView, "description": "Already registered"}})
async def register_problem(body: ProblemCreate, request: Request, response: Response,
                           principal: Principal = Depends(authenticate)) -> ProblemView:
    """Register a reference once; its id is the sha256 of the source. Registering again is harmless: it
    changes a problem's name and profile only for its owner; another key's profile applies to its own jobs."""
    view, created = await asyncio.to_thread(_register, request.app.state.store, body, principal)
    response.status_code = 201 if created else 200
    response.headers["Location"] = f"/v1/problems/{view.id}"
    return view


@router.post("/v1/problems:batch", response_model=ProblemBatchResponse, tags=["problems"],
             responses={422: {"description": "Too many items, or not a list of items"}})
async def register_problems(body: ProblemBatchCreate, request: Request,
                            principal: Principal = Depends(authenticate)) -> ProblemBatchResponse:
    """Register many references at once (a whole problem set); a bad item gets an inline error and the
    others are registered. Idempotent like POST /v1/problems."""
    limit = request.app.state.api.max_batch_items
    if len(body.items) > limit:
        raise HTTPException(422, [{"type": "too_long", "loc": ["body", "items"],
                                   "msg": f"at most {limit} items per batch; split the batch"}])
    store = request.app.state.store

    def register_all() -> list[ProblemBatchItem]:
        out: list[ProblemBatchItem] = []
        for index, raw in enumerate(body.items):
            try:
                item = ProblemCreate.model_validate(raw)
            except ValidationError as exc:
                detail = clean_errors(exc, ("body", "items", index))
                out.append(ProblemBatchItem(index=index, error=ItemError(status=422, detail=detail)))
                continue
            view, created = _register(store, item, principal)
            out.append(ProblemBatchItem(index=index, problem=view, created=created))
        return out

    items = await asyncio.to_thread(register_all)
    registered = [item for item in items if item.problem is not None]
    return ProblemBatchResponse(registered=len(registered), created=sum(bool(item.created) for item in registered),
                                rejected=len(items) - len(registered), items=items)


@router.get("/v1/problems/{problem_id}", response_model=ProblemView, tags=["problems"],
            responses={404: {"description": "Unknown id"}})
async def read_problem(request: Request, problem_id: str = Path(pattern=PROBLEM_ID_PATTERN),
                       principal: Principal = Depends(authenticate)) -> ProblemView:
    problem = await asyncio.to_thread(request.app.state.store.get_problem, problem_id, principal.key_id)
    if problem is None:
        raise not_found("problem", problem_id)
    return _problem_view(problem, principal)


@router.get("/v1/health", response_model=Health, tags=["system"])
async def health() -> Health:
    """The process is alive (no dependency is checked)."""
    return Health(status="ok")


@router.get("/v1/ready", response_model=Readiness, tags=["system"],
            responses={503: {"model": Readiness, "description": "Store or workers unavailable"}})
async def ready(request: Request):
    """Ready when the store answers, at least one worker is reachable and (embedded workers) the start-up
    check, one tiny evaluation through the judge and a candidate sandbox, passed, and the precompiled header
    CUDA builds use was built (or failed to build: builds then take the full path), and no device lane is
    stalled (its watchdog is restarting it)."""
    state = request.app.state
    store_state = "ok"
    try:
        await asyncio.to_thread(state.store.ping)
    except Exception as exc:
        log.warning("readiness: store unreachable: %s", exc)
        store_state = f"unreachable: {type(exc).__name__}"
    workers = await asyncio.to_thread(state.launcher.workers_alive)
    check = getattr(state, "startup_check", None)  # set by `kerneljudge serve` (None: not run here)
    pch = getattr(state, "pch_warmup", None)  # likewise: the precompiled header being built at start-up
    lanes = [LaneReadiness(name=lane.name, busy=lane.busy, stalled=lane.stalled, restarts=lane.restarts,
                           last_progress_s_ago=round(lane.last_progress_s_ago, 3)) for lane in state.launcher.lane_health()]
    body = Readiness(ready=store_state == "ok" and workers > 0 and (check is None or check.ok)
                     and (pch is None or pch.done) and not any(lane.stalled for lane in lanes), store=store_state,
                     workers=workers, mode=state.launcher.mode, selfcheck=None if check is None else check.state,
                     precompiled_header=None if pch is None else pch.state, lanes=lanes)
    return JSONResponse(body.model_dump(), status_code=200 if body.ready else 503)


@router.get("/metrics", include_in_schema=False)
def metrics(request: Request) -> Response:
    try:
        payload = generate_latest(request.app.state.metrics.registry)
    except Exception as exc:
        log.exception("metrics collection failed")
        raise HTTPException(503, f"metrics unavailable: {type(exc).__name__}") from None
    return Response(payload, media_type=CONTENT_TYPE_LATEST)
