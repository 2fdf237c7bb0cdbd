"""The Explorer's local web server: the static UI and a JSON API over loaded profiles.

Loopback only, standard library only (http.server): the UI is three static files shipped in the
package, so it works on a machine without network access. Every API answer is JSON; a bad
request gets ``{"error": ...}`` with status 400/404 and the server keeps serving.
"""
from __future__ import annotations

import json
import mimetypes
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from ..profiling.report import find_profile
from . import compare, critical_path
from .profile_data import CHIP, ProfileData
from .recommendations import recommendations

STATIC = Path(__file__).with_name("static")


class Profiles:
    """The profiles under a directory, loaded on first use (newest first)."""

    def __init__(self, root: Path) -> None:
        newest = find_profile(root)  # raises FileNotFoundError with the explanation
        found = sorted((p.parent for p in Path(root).rglob("Summary.parquet")), key=lambda p: -p.stat().st_mtime)
        self.paths = {str(i): p for i, p in enumerate(found)}
        self.default = next(k for k, p in self.paths.items() if p == newest)
        self._loaded: dict[str, ProfileData] = {}
        self._lock = threading.Lock()

    def get(self, key: str | None) -> ProfileData:
        key = key or self.default
        if key not in self.paths:
            raise KeyError(f"no profile {key!r}: the server has {sorted(self.paths)}")
        with self._lock:
            if key not in self._loaded:
                self._loaded[key] = ProfileData(self.paths[key])
            return self._loaded[key]

    def peers(self, key: str | None) -> list[ProfileData]:
        """The other ranks' profiles of the same run: the same world size, another rank, and an
        overlapping time range."""
        me = self.get(key)
        if me.meta.get("world_size") is None:
            return []
        out = []
        for other in self.paths:
            data = self.get(other)
            m = data.meta
            if (m.get("world_size") == me.meta["world_size"] and m.get("rank") != me.meta.get("rank")
                    and m["first_hw_timestamp"] <= me.meta["last_hw_timestamp"]
                    and me.meta["first_hw_timestamp"] <= m["last_hw_timestamp"]):
                out.append(data)
        return out

    def listing(self) -> list[dict]:
        return [{"key": k, "path": str(p), "default": k == self.default} for k, p in self.paths.items()]


def _int(query: dict, name: str, default: int | None = None) -> int:
    if name not in query:
        if default is None:
            raise ValueError(f"missing query parameter {name!r}")
        return default
    return int(query[name][0])


def _api(profiles: Profiles, route: str, query: dict[str, list[str]]) -> Any:
    one = (lambda name: query[name][0] if name in query else None)  # noqa: E731
    data = profiles.get(one("profile")) if route != "profiles" else None
    if route == "profiles":
        return profiles.listing()
    if route == "overview":
        return {**data.overview(), "recommendations": recommendations(data)}
    if route == "lanes":
        tl = data.timeline(one("view") or "system", one("generation"))
        return {"rows": tl.labels(), "start": tl.start, "end": tl.end}
    if route == "timeline":
        tl = data.timeline(one("view") or "system", one("generation"))
        start, end = _int(query, "start", tl.start), _int(query, "end", tl.end)
        return {"start": start, "end": end, "rows": tl.window(start, end, max(1, min(_int(query, "px", 1000), 8000)))}
    if route == "event":
        if one("view") == CHIP:
            return data.estimated_details(_int(query, "id"))
        return data.details(_int(query, "id"))
    if route == "gaps":
        return data.gaps()
    if route == "kernel_waits":
        return data.kernel_waits(one("generation") or data.meta.get("target_generation"))
    if route == "collectives":
        return data.collectives(profiles.peers(one("profile")))
    if route == "sources":
        return data.sources()
    if route == "source":
        return data.source(one("file") or "")
    if route == "hierarchy":
        return data.hierarchy(one("generation"))
    if route == "critical_path":
        what = critical_path.WhatIf(generation=one("generation"), engine=one("engine"),
                                    remove_fallbacks=one("remove_fallbacks") == "1")
        return {**critical_path.replay(data, what), "what_ifs": critical_path.what_ifs(data)}
    if route == "compare":
        other = profiles.get(one("other")) if one("other") else None
        return compare.compare(data, other, one("generation_a"), one("generation_b"))
    raise LookupError(f"no API route {route!r}")


def handler(profiles: Profiles) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # quiet: the UI polls
            return

        def _send(self, status: int, body: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            url = urlparse(self.path)
            if url.path.startswith("/api/"):
                try:
                    answer = _api(profiles, url.path[len("/api/"):], parse_qs(url.query))
                    status = HTTPStatus.OK
                except (KeyError, LookupError) as e:
                    answer, status = {"error": str(e).strip("'\"")}, HTTPStatus.NOT_FOUND
                except ValueError as e:
                    answer, status = {"error": str(e)}, HTTPStatus.BAD_REQUEST
                self._send(status, json.dumps(answer).encode(), "application/json")
                return
            name = "index.html" if url.path in ("", "/") else url.path.lstrip("/")
            path = (STATIC / name).resolve()
            if path.parent != STATIC.resolve() or not path.is_file():
                self._send(HTTPStatus.NOT_FOUND, b"not found", "text/plain")
                return
            self._send(HTTPStatus.OK, path.read_bytes(), mimetypes.guess_type(path.name)[0] or "text/plain")

    return Handler


def serve(root: Path, port: int = 0) -> ThreadingHTTPServer:
    """A server on 127.0.0.1:``port`` (0: any free port) over the profiles under ``root``; call
    ``serve_forever`` on it."""
    server = ThreadingHTTPServer(("127.0.0.1", port), handler(Profiles(root)))
    server.daemon_threads = True
    return server
