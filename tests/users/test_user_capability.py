"""The user/1 capability on its own: `UserServer` and `UserClient` over a real socket."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Sequence

import orjson
import pytest

from proctor import ConnectionLost, RemoteError
from proctor.agents import UserClient, user_tool
from proctor.env import Capability, Message, UserServer, scripted
from proctor.records import Trace


@pytest.fixture
async def server() -> AsyncIterator[UserServer]:
    users = UserServer()
    await users.start()
    try:
        yield users
    finally:
        await users.aclose()


def _binding(users: UserServer, dialogue: str) -> Capability:
    return Capability("user", "user", users.url, {"dialogue": dialogue})


async def test_a_scripted_user_answers_in_turn_then_ends(server: UserServer) -> None:
    dialogue = server.open(scripted(["one", "two"]), opening="hello")
    trace = Trace("t")
    client = UserClient(_binding(server, dialogue.id), trace=trace)
    assert [await client.send("a"), await client.send("b"), await client.send("c")] == [
        "one",
        "two",
        None,
    ]
    assert client.done and dialogue.done
    assert await client.send("d") is None  # over is over: nothing more is recorded
    lines = ["user: hello", "agent: a", "user: one", "agent: b", "user: two", "agent: c"]
    assert dialogue.transcript() == "\n".join(lines)
    kinds = [(s.kind, s.content) for s in trace.steps]
    assert kinds[:4] == [("assistant", "a"), ("user", "one"), ("assistant", "b"), ("user", "two")]
    assert all(s.data and s.data["dialogue"] for s in trace.steps)


async def test_done_ends_the_dialogue_early(server: UserServer) -> None:
    dialogue = server.open(scripted(["more?"], done=lambda text: "bye" in text))
    client = UserClient(_binding(server, dialogue.id))
    assert await client.send("bye now") is None


async def test_an_unknown_dialogue_and_a_failing_user_are_errors(server: UserServer) -> None:
    with pytest.raises(RemoteError, match="no such dialogue"):
        await UserClient(_binding(server, "guessed")).send("hi")

    def broken(messages: Sequence[Message]) -> str:
        raise LookupError("no persona")

    dialogue = server.open(broken)
    with pytest.raises(RemoteError, match="LookupError: no persona"):
        await UserClient(_binding(server, dialogue.id)).send("hi")
    closed = server.open(scripted(["x"]))
    server.close(closed)
    with pytest.raises(RemoteError, match="no such dialogue"):
        await UserClient(_binding(server, closed.id)).send("hi")


async def test_a_binding_without_a_dialogue_is_refused(server: UserServer) -> None:
    with pytest.raises(ValueError, match="no dialogue for this episode"):
        UserClient(Capability("user", "user", server.url))


async def test_the_tool_tells_the_model_when_the_user_left(server: UserServer) -> None:
    dialogue = server.open(scripted(["sure"]))
    tool = user_tool(UserClient(_binding(server, dialogue.id)))
    assert tool.name == "talk_to_user"
    assert (await tool({"message": "hi"})).content == "sure"
    assert (await tool({"message": "ok"})).content == "The user has ended the conversation."
    assert (await tool({"message": ""})).is_error


async def test_bad_requests_get_an_error_line(server: UserServer) -> None:
    assert server.url.startswith("unix://")
    reader, writer = await asyncio.open_unix_connection(server.url.removeprefix("unix://"))
    writer.write(b'{"text": 1}\n')
    reply = orjson.loads(await reader.readline())
    writer.close()
    assert reply["error"]["code"] == -32602


async def test_a_line_over_the_limit_is_refused(server: UserServer) -> None:
    dialogue = server.open(scripted(["never"]))
    with pytest.raises(RemoteError, match="at most") as caught:
        await UserClient(_binding(server, dialogue.id)).send("x" * (1024 * 1024 + 1))
    assert caught.value.code == -32600 and dialogue.messages == []


async def test_closing_the_server_cancels_a_user_still_thinking() -> None:
    users = UserServer()
    await users.start()
    thinking, cancelled = asyncio.Event(), asyncio.Event()

    async def slow(messages: Sequence[Message]) -> str:
        thinking.set()
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()
        return "never"

    dialogue = users.open(slow)
    sent = asyncio.create_task(UserClient(_binding(users, dialogue.id)).send("hi"))
    await asyncio.wait_for(thinking.wait(), 30)
    await users.aclose()
    assert cancelled.is_set()
    with pytest.raises((ConnectionLost, OSError)):  # no reply is coming
        await asyncio.wait_for(sent, 30)


async def test_a_dialogue_its_task_let_go_of_is_gone(server: UserServer) -> None:
    dialogue = server.open(scripted(["x"]))
    binding = _binding(server, dialogue.id)
    del dialogue
    gc.collect()
    with pytest.raises(RemoteError, match="no such dialogue"):
        await UserClient(binding).send("hi")
