"""The web app of ``dxplain serve``: a page and a JSON API over the published runs of one output folder.

    GET /api/runs                              published runs, newest first
    GET /api/runs/{run}/summary                a run's health (data, model, fidelity, counts) and its internals
    GET /api/runs/{run}/users?q=PREFIX         user ids that start with PREFIX (at most 20)
    GET /api/runs/{run}/users/{user}           the user's targets, each with every row the run kept for it
    GET /api/runs/{run}/users/{user}/changes   the items that entered and left the user's targets since the previous run
    GET /api/runs/{run}/items?q=TEXT           items whose id starts with TEXT or whose title contains it (at most 20)
    GET /api/runs/{run}/items/{item}/users     the users the run explains this item for, by rank (at most 100)

``{run}`` is a published run's id or ``latest``. Read-only; a run is opened only by a name the folder lists
(``io.run_lookup.run_folder``), so no request names a path. With a token every API request must carry it
(``Authorization: Bearer T``, or ``?token=T``), else 401; the page and its two assets hold no data and need none.
Unknown runs and users are a 404 with a message; nothing a request sends reaches a traceback.
"""

from __future__ import annotations

import bisect
import hmac
import logging
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

from ..datasets.registry import resolve_catalogue
from ..errors import InputError
from ..io import run_lookup
from ..reporting import diff

STATIC = {"app.js": "text/javascript", "style.css": "text/css"}  # the only files served besides the page
REASON_FIELDS = ("side", "kind", "train_user", "train_item", "rating", "global_importance", "local_importance")
HEALTH = ("dataset", "model_kind", "loss", "prediction", "lam", "users", "targets", "attributions", "fidelity_tol")
HEALTH += ("fidelity_ok", "fidelity_max_rel_error", "fidelity_median_rel_error", "model_settings", "top_n", "top_k")
CACHED_RUNS = 4
SEARCH_LIMIT = 20
AGGREGATE_KINDS = ("bias", "unobserved")  # rows that stand for no one training row: no catalogue info
ITEM_USERS_LIMIT = 100
log = logging.getLogger(__name__)


def _has(sorted_ids: list[str], i: str) -> bool:
    at = bisect.bisect_left(sorted_ids, i)
    return at < len(sorted_ids) and sorted_ids[at] == i


def _json_value(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def targets_of(rows: pa.Table, catalogue: run_lookup.Catalogue | None = None) -> list[dict]:
    """The API's targets of one user from the run's rows: per target its item, rank, prediction and score, and its
    reasons (every kept row, the run's order: by side, then importance). With the dataset's catalogue, a target has
    its item's ``info`` (title, features) and a reason its training item's (item side) or user's (user side)."""
    out, order = {}, []
    records = rows.to_pylist()
    for r in records:
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
    if catalogue is not None:
        for t, info in zip((out[k] for k in order), catalogue.info("item", order)):
            t["info"] = info
        for side, field in (("item", "train_item"), ("user", "train_user")):
            reasons = [
                x
                for k in order
                for x in out[k]["reasons"]
                if x.get("side") == side and x.get(field) is not None and x.get("kind") not in AGGREGATE_KINDS
            ]
            for x, info in zip(reasons, catalogue.info(side, [x[field] for x in reasons])):
                x[f"{field}_info"] = info
    return sorted((out[k] for k in order), key=lambda t: (t["rec_rank"] or 0, str(t["item"])))


def changes_of(before: pa.Table | None, after: pa.Table, catalogue: run_lookup.Catalogue) -> dict:
    """A user's entered and left items (``reporting.diff.changes`` of both runs' targets of that user)."""
    if before is None:
        return {"entered": None, "left": None}
    changed = diff.changes(before, after).to_pylist()
    infos = catalogue.info("item", [c["item"] for c in changed])
    found = {"entered": [], "left": []}
    for c, info in zip(changed, infos):
        rank = c["rank_to"] if c["change"] == "entered" else c["rank_from"]
        found[c["change"]].append({"item": c["item"], "rec_rank": rank, "info": info})
    return found


class Runs:
    """The output folder's runs, each run's user index read once and kept for the ``CACHED_RUNS`` last used, and each
    dataset's catalogue (titles, features) read once."""

    def __init__(self, out: str):
        self.out = out
        self.indexes: OrderedDict[str, run_lookup.UserIndex] = OrderedDict()
        self.catalogues: OrderedDict[str, run_lookup.Catalogue] = OrderedDict()

    def catalogue(self, run_id: str) -> run_lookup.Catalogue:
        """The catalogue of the run's dataset; an empty one (ids only, no titles) when the dataset is not readable
        from here any more (moved, pruned, on a store this server cannot reach)."""
        dataset = str(run_lookup.summary_of(run_lookup.run_folder(self.out, run_id)).get("dataset") or "")
        if dataset not in self.catalogues:
            try:
                self.catalogues[dataset] = run_lookup.Catalogue(*resolve_catalogue(dataset))
            except (InputError, OSError, ValueError) as exc:
                log.warning("dataset %r of run %s: no titles or features (%s)", dataset, run_id, exc)
                self.catalogues[dataset] = run_lookup.Catalogue(None, None)
            while len(self.catalogues) > CACHED_RUNS:
                self.catalogues.popitem(last=False)
        self.catalogues.move_to_end(dataset)
        return self.catalogues[dataset]

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
        folder = run_lookup.run_folder(out, request.path_params["run"])
        s = run_lookup.summary_of(folder)
        health = {k: s[k] for k in HEALTH if k in s}
        return JSONResponse({"run": str(folder).rstrip("/").rsplit("/", 1)[-1], "health": health, "internals": s})

    async def search(request: Request) -> Response:
        index = runs.index(request.path_params["run"])
        q = request.query_params.get("q", "")
        ids = index.ids()
        start = bisect.bisect_left(ids, q)  # sorted: the ids with prefix q follow each other from here
        found = [i for i in ids[start : start + SEARCH_LIMIT] if i.startswith(q)]
        if len(found) < SEARCH_LIMIT and len(q) >= 2:  # and users whose name holds q, where the dataset has names
            named = runs.catalogue(request.path_params["run"]).search("user", q, 4 * SEARCH_LIMIT)
            present = [str(r["id"]) for r in named]
            found += [i for i in present if i not in found and _has(ids, i)][: SEARCH_LIMIT - len(found)]
        return JSONResponse(found)

    async def items(request: Request) -> Response:
        catalogue = runs.catalogue(request.path_params["run"])
        found = catalogue.search("item", request.query_params.get("q", "").strip(), SEARCH_LIMIT)
        return JSONResponse([{k: _json_value(v) for k, v in r.items()} for r in found])

    async def item_users(request: Request) -> Response:
        run_id, item_id = request.path_params["run"], request.path_params["item"]
        folder = run_lookup.run_folder(out, run_id)
        got = run_lookup.targets_where(folder, "item", pa.scalar(item_id))
        if got is None or got.num_rows == 0:
            return not_found(f"item {item_id!r}: no user's target in run {run_id!r}")
        total = got.num_rows
        got = got.sort_by([("rec_rank", "ascending"), ("user", "ascending")]).slice(0, ITEM_USERS_LIMIT)
        users = got.select(["user", "rec_rank"]).to_pylist()
        return JSONResponse({"item": got["item"][0].as_py(), "total": total, "users": users})

    async def user_changes(request: Request) -> Response:
        run_id, user_id = request.path_params["run"], request.path_params["user"]
        folder = run_lookup.run_folder(out, run_id)
        name = str(folder).rstrip("/").rsplit("/", 1)[-1]
        after = run_lookup.targets_where(folder, "user", pa.scalar(user_id))
        if after is None or after.num_rows == 0:
            return not_found(f"user {user_id!r}: no targets in run {run_id!r}")
        previous = run_lookup.previous_run(out, name)
        before = None
        if previous is not None:
            before = run_lookup.targets_where(run_lookup.run_folder(out, previous), "user", after["user"][0])
            if before is not None and before.schema.field("user").type != after.schema.field("user").type:
                before = None
        found = changes_of(before, after.select(["user", "item", "rec_rank"]), runs.catalogue(name))
        return JSONResponse({"user": after["user"][0].as_py(), "run": name, "from": previous, **found})

    async def user(request: Request) -> Response:
        run_id, user_id = request.path_params["run"], request.path_params["user"]
        index = runs.index(run_id)
        rows = index.rows(user_id)
        if rows is None:
            return not_found(
                f"user {user_id!r}: no explained targets in run {run_id!r} (search: /api/runs/{{run}}/users?q=)"
            )
        user = rows.column("user")[0].as_py()
        catalogue = runs.catalogue(run_id)
        return JSONResponse(
            {"user": user, "info": catalogue.info("user", [user])[0], "targets": targets_of(rows, catalogue)}
        )

    middleware = [Middleware(TokenCheck, token=token)] if token else []
    return Starlette(
        # An unknown run (``run_lookup.run_folder``) or any other bad name in a request: a 404 naming it.
        exception_handlers={InputError: lambda request, exc: not_found(str(exc))},
        routes=[
            Route("/", page),
            Route("/static/{name}", static),
            Route("/api/runs", list_runs),
            Route("/api/runs/{run}/summary", summary),
            Route("/api/runs/{run}/users", search),
            Route("/api/runs/{run}/users/{user}", user),
            Route("/api/runs/{run}/users/{user}/changes", user_changes),
            Route("/api/runs/{run}/items", items),
            Route("/api/runs/{run}/items/{item}/users", item_users),
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
