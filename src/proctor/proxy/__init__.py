"""The interception proxy: one OpenAI/Anthropic-compatible endpoint for many rollouts.

```python
async with InterceptionProxy("openai/gpt-4.1-mini") as proxy:
    job = await taskset.run(CommandAgent(["my-harness"]), proxy=proxy)
```

Each rollout gets a secret; its harness sees `OPENAI_BASE_URL` / `OPENAI_API_KEY`
(and the Anthropic pair) pointing at the proxy, never the real key. Every turn lands
on the rollout's trace; budgets in `ModelLimits` are enforced per rollout.
"""

from __future__ import annotations

from .._public import lazy_exports

TYPE_CHECKING = False  # typing's constant, without importing typing (mypy reads it so)

__all__ = [
    "FrameSink",
    "Frames",
    "HttpLimits",
    "InterceptionProxy",
    "ModelLimits",
    "ProxySession",
    "SessionQuotas",
    "SharedBudget",
    "Upstream",
]
_EXPORTS = {
    "FrameSink": "._frames",
    "Frames": "._frames",
    "HttpLimits": ".._http",
    "InterceptionProxy": "._proxy",
    "ModelLimits": "._session",
    "ProxySession": "._session",
    "SessionQuotas": "._quotas",
    "SharedBudget": "._session",
    "Upstream": "._proxy",
}

if TYPE_CHECKING:
    from .._http import HttpLimits
    from ._frames import Frames, FrameSink
    from ._proxy import InterceptionProxy, Upstream
    from ._quotas import SessionQuotas
    from ._session import ModelLimits, ProxySession, SharedBudget
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        _EXPORTS,
        deprecated={"Limits": "proctor.proxy.ModelLimits"},
    )
