"""The floor of `bench/proxy.py`: a relay on proctor's own HTTP layer in its own process.

`python bench/_proxy_relay.py --upstream URL [--uvloop]` forwards each request's body to
the upstream's chat completions and returns its answer, on the `HttpServer` and
`HttpClient` the interception proxy uses, and nothing else: no authentication, parsing,
budgets or recording. Prints `{"url": ..., "secrets": ["-"]}` as one JSON line (the
same shape as `_proxy_server.py`) and serves until SIGTERM. What it costs per request
is what any proxy on this HTTP layer costs before doing its own work.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys

from proctor._http import HttpClient, HttpServer, Request, Response

_JSON = [("content-type", "application/json")]


async def serve(upstream: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    url = upstream.rstrip("/") + "/chat/completions"
    async with HttpClient() as client:

        async def relay(req: Request) -> Response:
            async with await client.request("POST", url, headers=_JSON, body=req.body) as resp:
                data = await resp.read()
            return Response(resp.status, _JSON, data)

        async with HttpServer(relay) as server:
            line = {"url": server.url + "/v1", "secrets": ["-"]}
            sys.stdout.write(json.dumps(line) + "\n")
            sys.stdout.flush()
            await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--uvloop", action="store_true")
    args = parser.parse_args()
    factory = None
    if args.uvloop:
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(serve(args.upstream))


if __name__ == "__main__":
    main()
