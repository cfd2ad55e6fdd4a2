"""The board's web application (Starlette): one page, its static files, and a JSON API.

Routes, every one read-only (GET):

- ``/``: the page; ``/static/{name}``: its script, styles and uPlot, from the package.
- ``/api/runs``: the runs table; ``/api/ledger``: ``privfl site budget --json``'s report.
- ``/api/runs/{id}``: one run's job file, fingerprints and audit verification.
- ``/api/runs/{id}/live``: progress, curves and each party's last log line (polled).
- ``/runs/{id}/files/{path}``: a run output (a plot, a log) from inside that run only.

With a token, every request must carry it: ``Authorization: Bearer TOKEN``, or
``?token=TOKEN`` once (the answer sets a same-site cookie for the page's later requests).
"""

from __future__ import annotations

import hmac
import mimetypes
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from privfl.errors import PrivflError
from privfl.tools.board.audit import audit_of
from privfl.tools.board.folders import Refused, Run, find_runs, readable
from privfl.tools.board.reading import audited_jobs, job_of, live, overview

STATIC = Path(__file__).parent / "static"
STATIC_FILES = ("index.html", "board.js", "board.css", "uPlot.iife.min.js", "uPlot.min.css")
COOKIE = "privfl_board"
LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "[::1]", "::1"]
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
    "style-src 'self' 'unsafe-inline'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


@dataclass
class Board:
    """What the board reads: the run folders it was given and the site policy (or none)."""

    roots: list[Path]
    policy_file: Path | None = None
    token: str | None = None
    loopback: bool = True
    runs: dict[str, Run] = field(default_factory=dict)

    def refresh(self) -> dict[str, Run]:
        self.runs = {run.id: run for run in find_runs(self.roots)}
        return self.runs

    def run(self, run_id: str) -> Run | None:
        return self.runs.get(run_id) or self.refresh().get(run_id)


def create_app(board: Board) -> Starlette:
    """The ASGI application over ``board``."""
    routes = [
        Route("/", lambda request: _static("index.html")),
        Route("/favicon.ico", lambda request: Response(status_code=204, headers=HEADERS)),
        Route("/static/{name}", lambda request: _static(request.path_params["name"])),
        Route("/api/runs", lambda request: _json([overview(r) for r in board.refresh().values()])),
        Route("/api/ledger", lambda request: _json(ledger(board.policy_file))),
        Route("/api/runs/{id}", lambda request: _with_run(board, request, _detail)),
        Route("/api/runs/{id}/live", lambda request: _with_run(board, request, live)),
        Route("/runs/{id}/files/{path:path}", lambda request: _file(board, request)),
    ]
    middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=LOOPBACK_HOSTS)]
    app = Starlette(routes=routes, middleware=middleware if board.loopback else [])
    return app if board.token is None else TokenGate(app, board.token)  # type: ignore[return-value]


def ledger(policy_file: Path | None) -> dict[str, Any]:
    """The site ledger as ``privfl site budget --json`` prints it, or why there is none."""
    from privfl.config.policy import ENV_VAR, find_policy, load_policy
    from privfl.runs.site_report import site_report

    try:
        path = find_policy(policy_file)
        if path is None:
            return {"error": f"no site policy: start the board with --policy FILE or ${ENV_VAR}"}
        return {"policy": str(path), **site_report(load_policy(path))}
    except (PrivflError, OSError) as exc:
        return {"error": str(exc)}


def _detail(run: Run) -> dict[str, Any]:
    return {
        **overview(run),
        "job": job_of(run),
        "audited_jobs": audited_jobs(run),
        "audit": audit_of(run),
        "plots": sorted(
            p.relative_to(run.path).as_posix()
            for p in [*run.path.glob("*.png"), *run.path.glob("*/*.png")]
            if not p.is_symlink()
        ),
    }


def _with_run(board: Board, request: Request, read: Any) -> Response:
    run = board.run(request.path_params["id"])
    if run is None:
        return PlainTextResponse("no such run", status_code=404, headers=HEADERS)
    return _json(read(run))


def _file(board: Board, request: Request) -> Response:
    run = board.run(request.path_params["id"])
    if run is None:
        return PlainTextResponse("no such run", status_code=404, headers=HEADERS)
    try:
        path = readable(run, request.path_params["path"])
    except Refused:
        return PlainTextResponse("not a file of this run the board shows", 403, headers=HEADERS)
    media = mimetypes.guess_type(path.name)[0] or "text/plain"
    if media != "image/png":
        media = "text/plain; charset=utf-8"
    return FileResponse(path, media_type=media, headers=HEADERS)


def _static(name: str) -> Response:
    if name not in STATIC_FILES:
        return PlainTextResponse("not found", status_code=404, headers=HEADERS)
    return FileResponse(STATIC / name, headers=HEADERS)


def _json(data: Any) -> Response:
    return JSONResponse(data, headers=HEADERS)


class TokenGate:
    """Refuses (401) every request that does not carry the board's token."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        offered = _offered(request)
        if offered is None or not hmac.compare_digest(offered.encode(), self.token.encode()):
            response: Response = PlainTextResponse(
                "this board needs its token", status_code=401, headers=HEADERS
            )
            await response(scope, receive, send)
            return
        if request.query_params.get("token") is not None:
            await self.app(scope, receive, _setting_cookie(send, self.token))
            return
        await self.app(scope, receive, send)


def _offered(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    if header.startswith("Bearer "):
        return header.removeprefix("Bearer ")
    return request.query_params.get("token") or request.cookies.get(COOKIE)


def _setting_cookie(send: Send, token: str) -> Send:
    cookie = f"{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict".encode()

    async def sending(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message["headers"], (b"set-cookie", cookie)]}
        await send(message)

    return sending  # type: ignore[return-value]
