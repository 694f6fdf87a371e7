"""Children that a test signals start with the dispositions the test relies on.

A shell ignores SIGINT in its background jobs (`pytest ... &`), and an ignored signal
stays ignored across `exec`: Python then installs no KeyboardInterrupt handler and
asyncio none for Ctrl-C, so a SIGINT a test sends would do nothing. Honouring an
inherited SIG_IGN is right for the program (Ctrl-C in the shell is not meant for its
background jobs); a test that sends SIGINT asks for the default in its child instead.
"""

from __future__ import annotations

import signal


def default_sigint() -> None:
    """A `preexec_fn`: SIGINT at its default disposition in the child, whatever the parent's."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
