"""Plan checks 3, 6 and 7: credentials by name, live model catalogs, pricing and cost.

Only variable names are ever reported, never their values. The catalog check reads
`GET /v1/models` (paged for Anthropic) and nothing else: it spends no tokens, and a
refusal is reported by its status alone, since providers quote part of the key in
their error bodies. SigV4 models are always asked, signed with the AWS standard chain:
`bedrock/` in the control plane's `GET /foundation-models` (which also says whether a
model takes image input), `mantle/` in its endpoint's `GET /models`.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from ._config import BatchConfig, LimitsConfig

if TYPE_CHECKING:
    from ..models import Price

__all__ = [
    "Credential",
    "catalogs",
    "credentials",
    "keys_in_environment",
    "projected_cost",
    "unpriced",
]

CATALOG_TIMEOUT = 15.0
# Credentials of clouds and model hubs besides the providers' API keys (which are the
# known providers' key variables, and any variable ending in _API_KEY).
_CLOUD_KEYS = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AZURE_OPENAI_API_KEY",
    "AZURE_CLIENT_SECRET",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
)
_MAX_PAGES = 50


@dataclass(frozen=True, slots=True)
class Credential:
    """One variable a batch reads: its name, who needs it, and whether it is set."""

    variable: str
    needed_by: str
    required: bool
    present: bool

    def to_dict(self) -> dict[str, Any]:
        """The fields by name, as JSON."""
        return asdict(self)


def _spec(model: str) -> Any:
    from ..models import parse_model

    return parse_model(model)


def _key_required(spec: Any) -> bool:
    """As `model_client` decides: only a hosted provider at its own URL needs a key."""
    from ..models._names import PROVIDERS

    known = PROVIDERS.get(spec.provider)
    return spec.api_key_env is not None and known is not None and known.base_url == spec.base_url


def _enabled_models(config: BatchConfig) -> dict[str, list[str]]:
    """Model string -> the enabled agent entries using it."""
    models: dict[str, list[str]] = {}
    for entry, name in zip(config.agents, config.agent_names(), strict=True):
        if entry.enabled and entry.model is not None:
            models.setdefault(entry.model, []).append(name)
    if config.judge is not None:
        models.setdefault(config.judge, []).append("judge")
    if config.user_model is not None:
        models.setdefault(config.user_model, []).append("user model")
    return models


def credentials(config: BatchConfig) -> list[Credential]:
    """Every variable the enabled agents and the runtime read, deduplicated."""
    found: dict[str, Credential] = {}
    for model, agents in _enabled_models(config).items():
        spec = _spec(model)
        if spec.api_key_env is None:
            continue
        required = _key_required(spec)
        seen = found.get(spec.api_key_env)
        if seen is None or (required and not seen.required):
            present = bool(os.environ.get(spec.api_key_env))
            found[spec.api_key_env] = Credential(
                spec.api_key_env, ", ".join(agents), required, present
            )
    token_env = getattr(config.runtime, "token_env", None)
    if token_env:
        found[token_env] = Credential(token_env, "runtime", True, bool(os.environ.get(token_env)))
    return list(found.values())


def keys_in_environment(config: BatchConfig) -> list[str]:
    """The names of provider keys set in this process's environment, sorted: the
    batch's own (its models', judge's and user model's key variables), every known provider's, any
    `*_API_KEY`, and cloud credentials (`AWS_*`, ...). Names only, never values."""
    from ..models._names import PROVIDERS

    names = {p.api_key_env for p in PROVIDERS.values() if p.api_key_env}
    names.update(_CLOUD_KEYS)
    for model in _enabled_models(config):
        env = _spec(model).api_key_env
        if env:
            names.add(env)
    names.update(n for n in os.environ if n.endswith("_API_KEY"))
    return sorted(n for n in names if os.environ.get(n))


# -- catalogs ---------------------------------------------------------------------------


async def catalogs(
    config: BatchConfig, *, images: bool = False
) -> tuple[list[str], list[dict[str, Any]]]:
    """Problems, and one record per catalog asked (URL, models wanted, models missing).

    A model sent images (an enabled `kind = "computer"` agent's, which sees a frame
    every turn; every model with `images`) must advertise image input where its catalog
    says (Bedrock's does).
    """
    from .._http import HttpClient

    groups: dict[_Where, list[str]] = {}
    seeing = {
        _spec(e.model).model
        for e in config.agents
        if e.enabled and e.kind == "computer" and e.model is not None
    }
    for model in _enabled_models(config):
        spec = _spec(model)
        if images:
            seeing.add(spec.model)
        where = _Where(spec.base_url, spec.api, spec.api_key_env, _key_required(spec))
        if spec.auth == "sigv4":
            where = _Where(spec.base_url, spec.api, None, True, signed=True)
        groups.setdefault(where, []).append(spec.model)
    problems: list[str] = []
    records = []
    async with HttpClient(connect_timeout=CATALOG_TIMEOUT, read_timeout=CATALOG_TIMEOUT) as http:
        for where, wanted in groups.items():
            wanted = sorted(set(wanted))
            if where.signed:
                record = await _signed_catalog(http, where, wanted, seeing)
            else:
                record = await _catalog(http, where, wanted)
            records.append(record)
            if record.get("error"):
                problems.append(f"{record['url']}: {record['error']}")
            for model in record.get("missing", ()):
                problems.append(f"model {model!r} is not in the catalog at {record['url']}")
            for model in record.get("no_images", ()):
                problems.append(
                    f"model {model!r} does not advertise image input at {record['url']}, "
                    "and the task set sends images"
                )
    return problems, records


@dataclass(frozen=True, slots=True)
class _Where:
    base_url: str
    api: str
    key_env: str | None
    required: bool
    signed: bool = False


async def _catalog(http: Any, where: _Where, wanted: list[str]) -> dict[str, Any]:
    api = where.api
    url = f"{where.base_url}/v1/models" if api == "messages" else f"{where.base_url}/models"
    record: dict[str, Any] = {"url": url, "wanted": wanted}
    key = os.environ.get(where.key_env) if where.key_env else None
    if not key and where.required:
        record["error"] = f"not asked: {where.key_env} is not set"
        return record
    try:
        listed = await _list_models(http, url, api, key or None)
    except _CatalogError as exc:
        record["error"] = str(exc)
        return record
    record["missing"] = [m for m in wanted if m not in listed]
    record["listed"] = len(listed)
    return record


class _CatalogError(Exception):
    pass


_INFERENCE_PROFILE = ("us.", "eu.", "apac.", "us-gov.", "ca.", "jp.", "au.", "global.")


async def _signed_catalog(
    http: Any, where: _Where, wanted: list[str], seeing: set[str]
) -> dict[str, Any]:
    """A SigV4 catalog: Bedrock's foundation models (with their input modalities), or
    a signed endpoint's `/models`. An inference profile id (`us.anthropic...`) is
    looked up as the foundation model it routes to."""
    from .._errors import HttpError, ModelError
    from ..models import aws_signer

    record: dict[str, Any] = {"url": f"{where.base_url}/models", "wanted": wanted}
    try:
        signer = aws_signer()
    except (ModelError, ImportError) as exc:
        record["error"] = f"not asked: {exc}"
        return record
    converse = where.api == "converse"
    if converse:
        root = where.base_url or signer.endpoint("bedrock")
        record["url"] = f"{root}/foundation-models"
    try:
        headers = signer.sign("GET", record["url"], (), b"")
        response = await http.request("GET", record["url"], headers=headers)
        body = await response.read()
    except (HttpError, ValueError, OSError) as exc:
        record["error"] = f"cannot reach it: {type(exc).__name__}"
        return record
    if response.status != 200:
        record["error"] = f"GET answered HTTP {response.status}"
        return record
    try:
        data = _json(body)
    except _CatalogError as exc:
        record["error"] = str(exc)
        return record
    listed: dict[str, list[str] | None] = {}
    for m in data.get("modelSummaries" if converse else "data") or ():
        if isinstance(m, dict) and (converse or "id" in m):
            modalities = m.get("inputModalities")
            listed[str(m.get("modelId" if converse else "id"))] = (
                [str(x) for x in modalities] if isinstance(modalities, list) else None
            )
    found = {m: _foundation(m) if converse else m for m in wanted}
    record["missing"] = [m for m, f in found.items() if f not in listed]
    record["listed"] = len(listed)
    record["no_images"] = [
        m for m, f in found.items() if m in seeing and "IMAGE" not in (listed.get(f) or ["IMAGE"])
    ]
    return record


def _foundation(model_id: str) -> str:
    for prefix in _INFERENCE_PROFILE:
        if model_id.startswith(prefix):
            return model_id[len(prefix) :]
    return model_id


async def _list_models(http: Any, url: str, api: str, key: str | None) -> set[str]:
    from .._errors import HttpError
    from ..models._names import ANTHROPIC_VERSION

    if api == "messages":
        headers = {"anthropic-version": ANTHROPIC_VERSION, **({"x-api-key": key} if key else {})}
    else:
        headers = {"authorization": f"Bearer {key}"} if key else {}
    ids: set[str] = set()
    after: str | None = None
    for _ in range(_MAX_PAGES):
        page = url + (
            "?limit=1000" + (f"&after_id={quote(after)}" if after else "")
            if api == "messages"
            else ""
        )
        try:
            response = await http.request("GET", page, headers=headers)
            body = await response.read()
        except (HttpError, ValueError, OSError) as exc:
            raise _CatalogError(f"cannot reach it: {type(exc).__name__}") from None
        if response.status != 200:
            raise _CatalogError(f"GET answered HTTP {response.status}")
        data = _json(body)
        ids.update(str(m["id"]) for m in data.get("data", ()) if isinstance(m, dict) and "id" in m)
        if not data.get("has_more") or not data.get("last_id"):
            return ids
        after = str(data["last_id"])
    return ids


def _json(body: bytes) -> dict[str, Any]:
    import orjson

    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise _CatalogError("the answer is not JSON") from None
    if not isinstance(data, dict):
        raise _CatalogError("the answer is not a model list")
    return data


# -- pricing ----------------------------------------------------------------------------


def unpriced(config: BatchConfig) -> list[str]:
    """Enabled models the shipped pricing table (or their model profile) does not price."""
    return [model for model in _enabled_models(config) if _price(model) is None]


def _price(model: str) -> Price | None:
    """A model string's price: its profile's for `profile:...`, else the table's."""
    from ..models import model_profile, price_of

    if model.startswith("profile:"):
        return model_profile(model).effective_price()
    return price_of(model)


def projected_cost(config: BatchConfig, rollouts_by_model: dict[str, int]) -> float | None:
    """Worst-case USD for these rollouts under `config.limits`; None when unbounded.

    A rollout's bound is the smallest of `max_cost` and what its token budgets cost
    at the model's dearest input (cache writes included) and output prices, with the
    long-context multipliers applied. The turn that crosses a budget still completes
    (`proctor.proxy.ModelLimits`), so the real spend can exceed this by one turn per rollout.
    """
    total = 0.0
    for model, count in rollouts_by_model.items():
        bound = _rollout_bound(model, config.limits)
        if bound is None:
            return None
        total += bound * count
    return total


def _rollout_bound(model: str, limits: LimitsConfig) -> float | None:
    bounds = [limits.max_cost] if limits.max_cost is not None else []
    price = _price(model)
    if price is not None:
        long = price.long_context_threshold is not None
        per_in = max(price.input, price.cache_write or 0.0) / 1e6
        per_in *= price.long_input_multiplier if long else 1.0
        per_out = price.output / 1e6 * (price.long_output_multiplier if long else 1.0)
        if limits.max_input_tokens is not None and limits.max_output_tokens is not None:
            bounds.append(limits.max_input_tokens * per_in + limits.max_output_tokens * per_out)
        if limits.max_total_tokens is not None:
            bounds.append(limits.max_total_tokens * max(per_in, per_out))
    return min(bounds) if bounds else None
