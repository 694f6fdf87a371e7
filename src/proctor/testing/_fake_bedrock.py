"""`FakeBedrockServer`: Bedrock runtime Converse, the control plane's model catalog and
a SigV4-signed OpenAI-compatible endpoint, each request's signature checked."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote

from .._http import Abort, Request, Response
from ._fake_bedrock_converse import aws_error, converse_body, converse_problem
from ._fake_bedrock_sigv4 import Refusal, _SignatureError, check_signature
from ._fake_bedrock_stream import EVENTSTREAM, converse_events
from ._fake_model import FakeModelServer, Policy, ReplyLike, echo, paced
from ._fake_model_reply import Fault, Reply
from ._fake_model_request import FakeRequest, json_body
from ._fake_model_turn import make_turn

__all__ = ["FAKE_AWS_ACCESS_KEY", "FAKE_AWS_SECRET_KEY", "FakeBedrockServer"]

FAKE_AWS_ACCESS_KEY = "AKIAPROCTORFAKE00001"
"""The access key id the fake accepts by default."""
FAKE_AWS_SECRET_KEY = "proctor-fake-secret-key-for-tests-only-0000"
"""The secret access key the fake checks signatures with by default."""

_CONVERSE = re.compile(r"/model/(?P<model>[^/]+)/(?P<op>converse|converse-stream)")
_JSON = ("content-type", "application/json")


class FakeBedrockServer(FakeModelServer):
    """A local AWS model provider that checks what AWS checks: every request must be
    SigV4-signed with the fake's credentials for its region and service (else 403, as
    AWS answers: `InvalidSignatureException`, `UnrecognizedClientException`).

    Serves `POST /model/{modelId}/converse` (Bedrock runtime Converse: validated like
    Bedrock validates, answered from the policy with `toolUse` blocks, usage and stop
    reasons) and `/converse-stream` (the same answer as ConverseStream events in the
    binary `application/vnd.amazon.eventstream` encoding), `GET /foundation-models`
    (ListFoundationModels, with input modalities), and, signed the same way, the
    OpenAI-compatible `/v1/chat/completions` and `/v1/models` of `FakeModelServer` (a
    SigV4-signed endpoint, `mantle/`). Policies, scripts, `inject`ed faults and
    `requests` work as on `FakeModelServer`; requests with a refused signature land on
    `refused` instead.

    Usage:
        async with FakeBedrockServer(["hello"]) as fake:
            os.environ.update(fake.environ())
            client = aws_client(fake.model_string())

    Args:
        models: the model ids served and listed, all advertising text and image input.
        text_only: further model ids that advertise text input only.
        region: the region signatures must be scoped to.
        service: the signing name signatures must be scoped to.
        access_key: the accepted access key id.
        secret_key: the secret signatures are checked with.
    """

    def __init__(
        self,
        policy: Policy | ReplyLike | Iterable[ReplyLike] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        models: Iterable[str] = ("anthropic.claude-sonnet-4-5-20250929-v1:0",),
        text_only: Iterable[str] = (),
        region: str = "us-east-1",
        service: str = "bedrock",
        access_key: str = FAKE_AWS_ACCESS_KEY,
        secret_key: str = FAKE_AWS_SECRET_KEY,
        record: bool = True,
    ) -> None:
        self.text_only = tuple(text_only)
        super().__init__(
            policy, host=host, port=port, models=(*models, *self.text_only), record=record
        )
        self.region = region
        self.service = service
        self.access_key = access_key
        self._secret = secret_key
        self.refused: list[Refusal] = []

    def environ(self) -> dict[str, str]:
        """The AWS variables that make botocore's standard chain sign for this fake."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self._secret,
            "AWS_REGION": self.region,
            "AWS_DEFAULT_REGION": self.region,
        }

    def model_string(self, model: str | None = None) -> str:
        """`bedrock/<model>@<this server>` (default: the first model)."""
        return f"bedrock/{model or self.models[0]}@{self.origin}"

    def mantle_string(self, model: str | None = None) -> str:
        """`mantle/<model>@<this server>/v1`, its chat completions signed."""
        return f"mantle/{model or self.models[0]}@{self.url}"

    async def _handle(self, request: Request) -> Response:
        try:
            check_signature(
                request,
                access_key=self.access_key,
                secret_key=self._secret,
                region=self.region,
                service=self.service,
            )
        except _SignatureError as exc:
            self.refused.append(Refusal(exc.kind, str(exc)))
            return aws_error(403, str(exc), exc.kind)
        if request.path == "/foundation-models":
            if request.method != "GET":
                return aws_error(405, "Use GET.")
            return Response.json(self._catalog())
        match = _CONVERSE.fullmatch(request.path)
        if match is None:
            return await super()._handle(request)
        if request.method != "POST":
            return aws_error(405, "Use POST.")
        stream = match["op"] == "converse-stream"
        return await self._converse(request, unquote(match["model"]), stream)

    def _catalog(self) -> dict[str, Any]:
        summaries = [
            {
                "modelArn": f"arn:aws:bedrock:{self.region}::foundation-model/{model}",
                "modelId": model,
                "modelName": model,
                "providerName": model.split(".", 1)[0].title(),
                "inputModalities": ["TEXT"] if model in self.text_only else ["TEXT", "IMAGE"],
                "outputModalities": ["TEXT"],
                "responseStreamingSupported": True,
                "customizationsSupported": [],
                "inferenceTypesSupported": ["ON_DEMAND"],
                "modelLifecycle": {"status": "ACTIVE"},
            }
            for model in self.models
        ]
        return {"modelSummaries": summaries}

    async def _converse(self, request: Request, model: str, stream: bool) -> Response:
        serial = f"{self._tag}{next(self._serial):06d}"
        body = json_body(request.body)
        problem = converse_problem(body, set(self.models), model)
        fake = self._arrived("converse", request, body, valid=problem is None)
        if problem is not None:
            return aws_error(400, problem)
        if fake.fault is not None and fake.fault.kind != "slow":
            return self._converse_fault(fake, fake.fault, serial, stream)
        reply = await self._reply(fake)
        if isinstance(reply, str):
            return aws_error(400, reply)
        turn = make_turn(fake, reply, serial)
        if stream:
            headers = [("content-type", EVENTSTREAM), ("x-amzn-requestid", serial)]
            return Response(200, headers, paced(converse_events(turn), turn.chunk_delay))
        return Response(200, [_JSON, ("x-amzn-requestid", serial)], converse_body(turn))

    def _converse_fault(
        self, request: FakeRequest, fault: Fault, serial: str, stream: bool
    ) -> Response:
        if fault.kind == "status":  # an `x-amzn-errortype` header names the AWS type
            kinds = [v for k, v in fault.headers if k.lower() == "x-amzn-errortype"]
            headers = tuple((k, v) for k, v in fault.headers if k.lower() != "x-amzn-errortype")
            if fault.retry_after is not None:
                headers = (("retry-after", f"{fault.retry_after:g}"), *headers)
            message = fault.message or f"HTTP {fault.code}"
            return aws_error(fault.code, message, kinds[0] if kinds else None, headers)
        if fault.kind == "reset" and not fault.mid_body:
            raise Abort
        missing = fault.kind == "missing_tool_calls"
        reply = Reply(finish_reason="tool_calls") if missing else echo(request)
        turn = make_turn(request, reply, serial)
        if stream:
            payload = b"".join(converse_events(turn, missing_calls=missing))
            kind = ("content-type", EVENTSTREAM)
        else:
            payload, kind = converse_body(turn, missing_calls=missing), _JSON
        if fault.kind in ("reset", "malformed_json"):  # the body cut short
            return Response(200, [kind], payload[: len(payload) // 2])
        return Response(200, [kind], payload)
