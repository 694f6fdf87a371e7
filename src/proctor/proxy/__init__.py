"""The interception proxy: one OpenAI/Anthropic-compatible endpoint for many rollouts.

```python
async with InterceptionProxy("openai/gpt-4.1-mini") as proxy:
    job = await taskset.run(CommandAgent(["my-harness"]), proxy=proxy)
```

Each rollout gets a secret; its harness sees `OPENAI_BASE_URL` / `OPENAI_API_KEY`
(and the Anthropic pair) pointing at the proxy, never the real key. Every turn lands
on the rollout's trace; budgets in `ModelLimits` are enforced per rollout.
"""

from .._http import HttpLimits
from .._public import publish
from ._frames import Frames, FrameSink
from ._proxy import InterceptionProxy, Upstream
from ._quotas import SessionQuotas
from ._session import ModelLimits, ProxySession, SharedBudget

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

publish(globals(), __all__, __name__, deprecated={"Limits": "proctor.proxy.ModelLimits"})
