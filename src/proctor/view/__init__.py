"""The dashboard: batch output directories served as web pages, live while runners write.

`proctor view OUT ...` serves pages (batches, one batch, one rollout, a comparison of
two batches or agents, a diff of two rollouts), a JSON API
and server-sent events on proctor's own HTTP server (`_http`), from the batch readers.
Every page is a Jinja2 template with autoescape on; charts are SVG drawn on the server.
"""

from .._public import publish
from ._server import ViewServer, serve_view
from ._transcript import as_text

__all__ = ["ViewServer", "as_text", "serve_view"]

publish(globals(), __all__, __name__)
