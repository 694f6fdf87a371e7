"""The dashboard's routes: the pages, a JSON API, live updates over SSE, static files.

Batch and rollout names in URLs are looked up (in the batches given at start, and in
the batch's index), never joined into paths. Blocking reads run in worker threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.resources
import os
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any
from urllib.parse import parse_qs, unquote

import orjson

from .._errors import CorruptIndexError, StoreError
from .._http import HeaderSource, Request, Response, as_pairs, format_sse
from ._access import COOKIE, Access, retry_after
from ._agents import agent_comparison, agent_names, agent_sections
from ._data import (
    MATRIX_LIMIT,
    BatchDir,
    batch_summary,
    compare_tasks,
    cost_curve,
    discover_more,
    errors_by_phase,
    group_reward_bins,
    model_task,
    parse_query,
    query_rollouts,
    reward_bins,
    signature,
)
from ._pages import STATUS_ORDER, render
from ._rollout_pages import artifact, diff_page, live_frame, rollout_api, rollout_page
from ._svg import cost_line, histogram

__all__ = ["COOKIE", "MAX_STREAMS", "ViewApp"]

MAX_STREAMS = 64  # live `/events` streams at once (the server allows 256 connections)
POLL = 0.5
PING = 15.0
RESCAN = 2.0
_STATIC = {
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
    "rollout.css": "text/css; charset=utf-8",
}
_SECURITY = [
    (
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    ),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("x-frame-options", "DENY"),
    ("cache-control", "no-store"),
]
_HTML = "text/html; charset=utf-8"


class ViewApp:
    """Answers the dashboard's requests for `batches` (name -> directory).

    Args:
        batches: the batches served, by unique name.
        token: when set, every request needs `?token=` or the session cookie it starts
            (see `_access`).
        hosts: the `Host` values accepted (None: any); guards loopback against DNS
            rebinding.
        roots: the paths given at start; rescanned every `RESCAN` seconds (while
            requests come) for batches that appeared since (added to `batches`).
    """

    def __init__(
        self,
        batches: dict[str, BatchDir],
        *,
        token: str | None = None,
        hosts: frozenset[str] | None = None,
        roots: Iterable[str | os.PathLike[str]] = (),
    ) -> None:
        self.batches = batches
        self.roots = [os.fspath(r) for r in roots]
        self._scanned = time.monotonic()
        self.access = Access(token)
        self.hosts = hosts
        self.closing = asyncio.Event()
        self._streams: dict[asyncio.Event, None] = {}  # live `/events` streams, oldest first
        # Each batch's page aggregates, with the signature of the batch they were made from.
        self._aggregates: dict[str, tuple[tuple[int, ...], dict[str, Any]]] = {}
        root = importlib.resources.files("proctor.view") / "static"
        self._static = {name: (root / name).read_bytes() for name in _STATIC}

    # -- access ---------------------------------------------------------------------

    def screen(self, request: Request) -> Response | None:
        """Refuse a request from its head: a foreign `Host`, a missing or wrong token
        (401), or a client past its wrong tokens (429)."""
        host = (request.headers.get("host") or "").lower()
        if self.hosts is not None and host not in self.hosts:
            return _plain(421, "unknown host", _SECURITY)
        status, wait = self.access.check(request, _params(request).get("token"))
        if status == 429:
            text = f"too many wrong tokens from your address: retry in {retry_after(wait)} s"
            return _plain(429, text, [("retry-after", retry_after(wait)), *_SECURITY])
        if status == 401:
            return _plain(401, "token required: open the dashboard with ?token=", _SECURITY)
        return None

    # -- routing --------------------------------------------------------------------

    async def handle(self, request: Request) -> Response:
        """Route `request`; starts a session (the cookie) when the query carried the token."""
        response = await self._route(request)
        headers = [*_pairs(response.headers), *_SECURITY]
        if self.access.token_ok(_params(request).get("token")):
            headers.append(("set-cookie", self.access.set_cookie()))
        return Response(response.status, headers, response.body)

    async def _route(self, request: Request) -> Response:
        if request.method not in ("GET", "HEAD"):
            return _plain(405, "method not allowed")
        parts = [unquote(p) for p in request.path.split("/")[1:]]
        if parts and parts[-1] == "" and len(parts) > 1:
            parts.pop()
        try:
            await self._maybe_rescan()
            return await self._dispatch(parts, request)
        except ValueError as exc:
            return Response.json({"error": str(exc)}, 400)
        except CorruptIndexError as exc:  # said in one line; rebuilt by the batch commands
            if parts[:1] == ["api"]:
                return Response.json({"error": str(exc)}, 503)
            return Response.text(render("damaged.html", reason=str(exc)), 503, content_type=_HTML)
        except StoreError as exc:  # no index (or one that is a link): not a batch now
            return Response.json({"error": str(exc)}, 404)

    async def _dispatch(self, parts: list[str], request: Request) -> Response:
        match parts:
            case [""]:
                return await self._page_batches()
            case ["events"]:
                return self._events()
            case ["static", name] if name in self._static:
                return Response(200, [("content-type", _STATIC[name])], self._static[name])
            case ["api", "batches"]:
                return Response.json(await self._summaries())
            case ["api", "b", name, *rest] if name in self.batches:
                return await self._api(self.batches[name], rest, request)
            case ["b", name] if name in self.batches:
                return await self._page_batch(self.batches[name])
            case ["b", name, "r", rid] if name in self.batches:
                return await rollout_page(self.batches, self.batches[name], rid, _params(request))
            case ["b", name, "r", rid, "artifacts", file] if name in self.batches:
                return await artifact(self.batches[name], rid, file)
            case ["b", name, "r", rid, "artifacts", "frames", file] if name in self.batches:
                return await artifact(self.batches[name], rid, f"frames/{file}")
            case ["diff"]:
                return await diff_page(self.batches, _params(request))
            case ["compare"]:
                return await self._page_compare(_params(request))
            case ["api", *_]:
                return Response.json({"error": "not found"}, 404)
        return _not_found()

    async def _api(self, batch: BatchDir, rest: list[str], request: Request) -> Response:
        match rest:
            case []:
                return Response.json(await asyncio.to_thread(self._batch_data, batch))
            case ["rollouts"]:
                query = parse_query(_params(request))
                return Response.json(await asyncio.to_thread(query_rollouts, batch, query))
            case ["r", rid]:
                return await rollout_api(batch, rid, _params(request))
            case ["r", rid, "frame"]:
                return await live_frame(batch, rid)
        return Response.json({"error": "not found"}, 404)

    # -- pages ----------------------------------------------------------------------

    async def _summaries(self) -> list[dict[str, Any]]:
        listed = list(self.batches.values())
        return await asyncio.to_thread(lambda: [_summary(b) for b in listed])

    async def rescan(self) -> list[str]:
        """Add the batches that appeared under `roots` since; their names."""
        self._scanned = time.monotonic()
        known = dict(self.batches)
        found: dict[str, BatchDir] = {}
        for root in self.roots:
            with contextlib.suppress(OSError):
                found |= await asyncio.to_thread(discover_more, [root], known | found)
        self.batches.update(found)
        return list(found)

    async def _maybe_rescan(self) -> None:
        if self.roots and time.monotonic() - self._scanned >= RESCAN:
            await self.rescan()

    async def _page_batches(self) -> Response:
        html = render("batches.html", batches=await self._summaries(), order=STATUS_ORDER)
        return Response.text(html, content_type=_HTML)

    async def _page_compare(self, params: dict[str, str]) -> Response:
        a, b = self.batches.get(params.get("a", "")), self.batches.get(params.get("b", ""))
        if a is None or b is None:
            return _not_found()
        agent_a, agent_b = params.get("agent_a") or None, params.get("agent_b") or None
        data = await asyncio.to_thread(_compare_data, a, b, agent_a, agent_b)
        html = render(
            "compare.html",
            a=a.name,
            b=b.name,
            agent_a=agent_a or "",
            agent_b=agent_b or "",
            names=sorted(self.batches),
            **data,
        )
        return Response.text(html, content_type=_HTML)

    async def _page_batch(self, batch: BatchDir) -> Response:
        data = await asyncio.to_thread(self._batch_data, batch)
        hist = data["reward_hist"]
        html = render(
            "batch.html",
            b=data,
            hist=histogram(hist["counts"], hist["lo"], hist["hi"]),
            by_agent=_small_hists(data["by_agent"]),
            by_model=_small_hists(data["by_model"]),
            by_task=_small_hists(data["by_task"]),
            cost=cost_line(data["cost_curve"]),
            matrix=_matrix(data["model_task"]),
            agents=data["agents"],
            order=STATUS_ORDER,
        )
        return Response.text(html, content_type=_HTML)

    # -- live -----------------------------------------------------------------------

    def _events(self) -> Response:
        # The stream closes its connection when it ends (evicted, or the server stops).
        headers = [("content-type", "text/event-stream; charset=utf-8"), ("connection", "close")]
        return Response(200, headers, self._stream())

    async def _stream(self) -> AsyncIterator[bytes]:
        """A `batches` event now and whenever a batch's files change; a ping when quiet.

        At most `MAX_STREAMS` run at once: a new one ends the oldest (whose page
        reconnects), so streams never hold every connection the server allows."""
        stop = asyncio.Event()
        if len(self._streams) >= MAX_STREAMS:
            oldest = next(iter(self._streams))
            del self._streams[oldest]
            oldest.set()
        self._streams[stop] = None
        try:
            seen: dict[str, tuple[int, ...]] = {}
            quiet = 0.0
            yield b"retry: 2000\n\n"
            while not (self.closing.is_set() or stop.is_set()):
                await self._maybe_rescan()
                now = {name: signature(b) for name, b in self.batches.items()}
                if now != seen:
                    seen = now
                    quiet = 0.0
                    yield format_sse(orjson.dumps(await self._summaries()), event="batches")
                elif quiet >= PING:
                    quiet = 0.0
                    yield b": ping\n\n"
                await _wait(stop, POLL)
                quiet += POLL
        finally:
            self._streams.pop(stop, None)

    def _batch_data(self, batch: BatchDir) -> dict[str, Any]:
        """The batch page's aggregates, computed again only when the batch changed (a
        finished batch of 100,000 rollouts costs seven passes over its index once)."""
        key = signature(batch)
        cached = self._aggregates.get(batch.path)
        if cached is not None and cached[0] == key:
            return cached[1]
        data = _aggregates(batch)
        self._aggregates[batch.path] = (key, data)
        return data


def _aggregates(batch: BatchDir) -> dict[str, Any]:
    return {
        **batch_summary(batch),
        "errors_by_phase": errors_by_phase(batch),
        "model_task": model_task(batch),
        "reward_hist": reward_bins(batch),
        "by_agent": group_reward_bins(batch, "agent"),
        "by_model": group_reward_bins(batch, "model"),
        "by_task": group_reward_bins(batch, "task"),
        "cost_curve": cost_curve(batch),
        "agent_names": agent_names(batch),
        "agents": agent_sections(batch),
    }


def _summary(batch: BatchDir) -> dict[str, Any]:
    """The batch's summary; a damaged index is said (`damaged`), not raised, so the
    other batches are still listed."""
    try:
        return batch_summary(batch)
    except CorruptIndexError as exc:
        return {"name": batch.name, "damaged": str(exc), "counts": {}, "total": 0}


def _compare_data(
    a: BatchDir, b: BatchDir, agent_a: str | None, agent_b: str | None
) -> dict[str, Any]:
    """The compare page's data: each batch's agents, the agents' paired comparison,
    and (two batches) their task-by-task table."""
    return {
        "agents_a": agent_names(a),
        "agents_b": agent_names(b),
        "stats": agent_comparison(a, b, agent_a, agent_b),
        "c": None if a.path == b.path else compare_tasks(a, b),
    }


def _small_hists(bins: dict[str, Any]) -> dict[str, Any]:
    """One small histogram per group (model or task), and how many groups were left out."""
    lo, hi = bins["lo"], bins["hi"]
    charts = {name: histogram(c, lo, hi, small=True) for name, c in bins["groups"].items()}
    return {"charts": charts, "more": bins["more"]}


def _matrix(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """Rows by task (many), a column per agent and model (few), for the task matrix."""
    cols = sorted({(str(c["agent"] or "-"), str(c["model"] or "-")) for c in cells})
    tasks = list(dict.fromkeys(str(c["task"] or "-") for c in cells))
    grid = {
        (str(c["agent"] or "-"), str(c["model"] or "-"), str(c["task"] or "-")): c for c in cells
    }
    return {"columns": cols, "tasks": tasks, "grid": grid, "full": len(cells) < MATRIX_LIMIT}


async def _wait(event: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)


def _params(request: Request) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(request.query, keep_blank_values=True).items()}


def _pairs(headers: HeaderSource) -> list[tuple[str, str]]:
    return list(as_pairs(headers))


def _plain(status: int, text: str, headers: HeaderSource = ()) -> Response:
    return Response.text(text, status, headers=headers)


def _not_found() -> Response:
    return Response.text(render("404.html"), 404, content_type=_HTML)
