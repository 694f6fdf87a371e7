"""`python -m proctor.serve SOURCE`: the command runtimes, HUD clients and users run.

The server lives in `proctor.channel._serve`; this module keeps the command's name and
exports what a parent of the command reads: a failed shutdown hook is reported on stderr
as `TEARDOWN_PREFIX<pid> <type>: <message>`, and a `TeardownError` built from it starts
with `SHUTDOWN_FAILED`.
"""

from .channel._serve import SHUTDOWN_FAILED, TEARDOWN_PREFIX, main, run_server, serve

__all__ = ["SHUTDOWN_FAILED", "TEARDOWN_PREFIX", "main", "run_server", "serve"]

if __name__ == "__main__":
    raise SystemExit(main())
