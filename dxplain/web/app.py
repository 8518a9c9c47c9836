"""The web app of ``dxplain serve``: a page and a JSON API over the published runs of one output folder.

    GET /api/runs                              published runs, newest first
    GET /api/runs/{run}/summary                a run's health (data, model, fidelity, counts) and its internals
    GET /api/runs/{run}/users?q=PREFIX         user ids that start with PREFIX (at most 20)
    GET /api/runs/{run}/users/{user}           the user's targets, each with every row the run kept for it

``{run}`` is a published run's id or ``latest``. Read-only; a run is opened only by a name the folder lists
(``io.run_lookup.run_folder``), so no request names a path. With a token every API request must carry it
(``Authorization: Bearer T``, or ``?token=T``), else 401; the page and its two assets hold no data and need none.
Unknown runs and users are a 404 with a message; nothing a request sends reaches a traceback.
"""

from __future__ import annotations

import bisect
import hmac
import math
from collections import OrderedDict
from importlib import resources

import pyarrow as pa
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..errors import InputError
from ..io import run_lookup

STATIC = {"app.js": "text/javascript", "style.css": "text/css"}  # the only files served besides the page
REASON_FIELDS = ("side", "kind", "train_user", "train_item", "rating", "global_importance", "local_importance")
HEALTH = ("dataset", "model_kind", "loss", "prediction", "lam", "users", "targets", "attributions", "fidelity_tol")
HEALTH += ("fidelity_ok", "fidelity_max_rel_error", "fidelity_median_rel_error", "model_settings", "top_n", "top_k")
CACHED_RUNS = 4


def _json_value(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def targets_of(rows: pa.Table) -> list[dict]:
    """The API's targets of one user from the run's rows: per target its item, rank, prediction and score, and its
    reasons (every kept row, the run's order: by side, then importance)."""
    out, order = {}, []
    for r in rows.to_pylist():
        key = r["item"]
        if key not in out:
            order.append(key)
            out[key] = {
                "item": r["item"],
                "rec_rank": r.get("rec_rank"),
                "prediction": _json_value(r.get("prediction")),
                "score": _json_value(r.get("score")),
                "reasons": [],
            }
        reason = {f: _json_value(r.get(f)) for f in REASON_FIELDS if f in r}
        reason["importance"] = _json_value(r["importance"])
        out[key]["reasons"].append(reason)
    return sorted((out[k] for k in order), key=lambda t: (t["rec_rank"] or 0, str(t["item"])))


class Runs:
    """The output folder's runs, each run's user index read once and kept for the ``CACHED_RUNS`` last used."""

    def __init__(self, out: str):
        self.out = out
        self.indexes: OrderedDict[str, run_lookup.UserIndex] = OrderedDict()

    def index(self, run_id: str) -> run_lookup.UserIndex:
        folder = run_lookup.run_folder(self.out, run_id)
        key = str(folder)
        if key not in self.indexes:
            self.indexes[key] = run_lookup.UserIndex(folder)
            while len(self.indexes) > CACHED_RUNS:
                self.indexes.popitem(last=False)
        self.indexes.move_to_end(key)
        return self.indexes[key]


def not_found(message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=404)


def create_app(out: str, token: str | None = None) -> Starlette:
    runs = Runs(out)

    async def page(request: Request) -> Response:
        return Response(resources.files(__package__).joinpath("static/index.html").read_text(), media_type="text/html")

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC:
            return not_found(f"no such file: {name!r}")
        body = resources.files(__package__).joinpath(f"static/{name}").read_text()
        return Response(body, media_type=STATIC[name])

    async def list_runs(request: Request) -> Response:
        return JSONResponse(run_lookup.published_runs(out))

    async def summary(request: Request) -> Response:
        try:
            folder = run_lookup.run_folder(out, request.path_params["run"])
        except InputError as exc:
            return not_found(str(exc))
        s = run_lookup.summary_of(folder)
        health = {k: s[k] for k in HEALTH if k in s}
        return JSONResponse({"run": str(folder).rstrip("/").rsplit("/", 1)[-1], "health": health, "internals": s})

    async def search(request: Request) -> Response:
        try:
            index = runs.index(request.path_params["run"])
        except InputError as exc:
            return not_found(str(exc))
        q = request.query_params.get("q", "")
        ids = index.ids()
        start = bisect.bisect_left(ids, q)  # sorted: the ids with prefix q follow each other from here
        return JSONResponse([i for i in ids[start : start + 20] if i.startswith(q)])

    async def user(request: Request) -> Response:
        run_id, user_id = request.path_params["run"], request.path_params["user"]
        try:
            index = runs.index(run_id)
        except InputError as exc:
            return not_found(str(exc))
        rows = index.rows(user_id)
        if rows is None:
            return not_found(
                f"user {user_id!r}: no explained targets in run {run_id!r} (search: /api/runs/{{run}}/users?q=)"
            )
        return JSONResponse({"user": rows.column("user")[0].as_py(), "targets": targets_of(rows)})

    middleware = [Middleware(TokenCheck, token=token)] if token else []
    return Starlette(
        routes=[
            Route("/", page),
            Route("/static/{name}", static),
            Route("/api/runs", list_runs),
            Route("/api/runs/{run}/summary", summary),
            Route("/api/runs/{run}/users", search),
            Route("/api/runs/{run}/users/{user}", user),
        ],
        middleware=middleware,
    )


class TokenCheck(BaseHTTPMiddleware):
    """401 for a request without the token (header ``Authorization: Bearer T`` or query ``token``)."""

    def __init__(self, app, token: str):
        super().__init__(app)
        self.token = token

    async def dispatch(self, request: Request, call_next):
        if not request.url.path.startswith("/api/"):  # the page and its assets hold no data
            return await call_next(request)
        given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        given = given or request.query_params.get("token", "")
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            return JSONResponse({"error": "this server needs its token: Authorization: Bearer <token>"}, 401)
        return await call_next(request)
