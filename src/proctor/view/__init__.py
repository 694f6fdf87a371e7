"""The dashboard: batch output directories served as web pages, live while runners write.

`proctor view OUT ...` serves pages (batches, one batch, one rollout, a comparison of
two batches or agents, a diff of two rollouts), a JSON API
and server-sent events on proctor's own HTTP server (`_http`), from the batch readers.
Every page is a Jinja2 template with autoescape on; charts are SVG drawn on the server.
"""

from __future__ import annotations

from .._public import lazy_exports

TYPE_CHECKING = False  # typing's constant, without importing typing (mypy reads it so)

__all__ = [
    "ViewServer",
    "as_text",
    "serve_view",
]
_EXPORTS = {
    "ViewServer": "._server",
    "as_text": "._transcript",
    "serve_view": "._server",
}

if TYPE_CHECKING:
    from ._server import ViewServer, serve_view
    from ._transcript import as_text
else:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
