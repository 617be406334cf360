"""The 2025-era fixture servers (FastMCP from `mcp==1.30.0`, `tests/servers/legacy_server.py`)
behave on the wire the way the gateway's legacy bridge will rely on: handshake and session,
server->client requests pushed over SSE mid-call and answered by separate POSTs, resumption
with an event store, and the modes in which a 1.x server cannot elicit at all.

Raw httpx throughout (helpers in `tests/support/legacy_wire.py`), plus the real `mcp` 2.x
client to show that a client pinned to 2026-07-28 cannot talk to such a server directly."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import (
    CreateMessageResult,
    ElicitResult,
    ListRootsResult,
    Root,
    TextContent,
)

from tests.conftest import Running
from tests.support.legacy import LegacyStats, start_legacy
from tests.support.legacy_wire import (
    LEGACY_VERSION,
    LegacySession,
    accept,
    is_server_request,
    new_client,
    rpc,
    text_of,
    tool_call,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def _start(tmp: Path, *args: str) -> Iterator[Running]:
    with ExitStack() as stack:
        yield start_legacy(stack, tmp, *args)


@pytest.fixture(scope="module")
def plain(module_tmp: Path) -> Iterator[Running]:
    """Default 1.x server: SSE answers, sessions, no event store; requests logged."""
    yield from _start(
        module_tmp, "--instance", "legacy-a", "--log", str(module_tmp / "plain.jsonl")
    )


@pytest.fixture(scope="module")
def stored(module_tmp: Path) -> Iterator[Running]:
    yield from _start(module_tmp, "--event-store")


@pytest.fixture(scope="module")
def json_mode(module_tmp: Path) -> Iterator[Running]:
    yield from _start(module_tmp, "--json-response")


@pytest.fixture(scope="module")
def stateless(module_tmp: Path) -> Iterator[Running]:
    yield from _start(module_tmp, "--stateless")


@pytest.fixture(scope="module")
def idle(module_tmp: Path) -> Iterator[Running]:
    yield from _start(module_tmp, "--idle-timeout", "2")


def leaf_errors(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaf_errors(inner)]
    return [exc]


def key() -> str:
    return uuid.uuid4().hex[:8]


def request_log(module_tmp: Path) -> list[dict]:
    path = module_tmp / "plain.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# ---- handshake, session, lists --------------------------------------------------------------


async def test_initialize_opens_a_session_answered_over_sse(plain: Running, module_tmp: Path):
    session = await LegacySession.open(plain.url)
    assert session.session_id and len(session.session_id) == 32
    assert session.initialize_content_type.startswith("text/event-stream")
    assert session.protocol_version == LEGACY_VERSION
    info = session.initialize_result["serverInfo"]
    assert info == {"name": "legacy-fixture", "version": "1.30.0"}
    assert "completions" in session.initialize_result["capabilities"]

    tools = await session.request(1, "tools/list")
    names = {t["name"] for t in tools["result"]["tools"]}
    assert {
        "add",
        "whoami",
        "book_table",
        "ask_model",
        "show_roots",
        "three_questions",
        "versioned_question",
        "side_effect",
        "ping_then_ask",
        "progress_steps",
        "slow",
        "url_consent",
    } <= names
    assert text_of(await session.call_tool(2, "add", {"a": 2, "b": 3})) == "5"
    assert text_of(await session.call_tool(3, "whoami")) == "legacy-a"

    # DELETE ends the session; from then on its id is unknown.
    deletes = (await LegacyStats(plain).get())["deletes"]
    assert (await session.delete()).status_code == 200
    r = await session.post(rpc(4, "tools/list"))
    assert r.status_code == 404, r.text
    assert r.json()["error"]["message"] == "Session not found"
    assert (await LegacyStats(plain).get())["deletes"] == deletes + 1

    # The request log saw each request with its session and version headers.
    mine = [e for e in request_log(module_tmp) if e["session_id"] == session.session_id]
    assert [e.get("method") for e in mine if e["http_method"] == "POST"] == [
        "notifications/initialized",
        "tools/list",
        "tools/call",
        "tools/call",
        "tools/list",
    ]
    assert all(e["protocol_version"] == LEGACY_VERSION for e in mine)
    assert [e["http_method"] for e in mine].count("DELETE") == 1


async def test_requests_without_a_session_or_with_a_foreign_host_are_refused(plain: Running):
    async with new_client() as http:
        base = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        r = await http.post(plain.url, headers=base, json=rpc(1, "tools/list"))
        assert r.status_code == 400 and "Missing session ID" in r.text
        # What a 2026-07-28 request gets from a 1.x server.
        r = await http.post(
            plain.url,
            json=rpc(1, "server/discover"),
            headers={**base, "MCP-Protocol-Version": "2026-07-28"},
        )
        assert r.status_code == 400 and "Missing session ID" in r.text
        # DNS-rebinding protection: the upstream's own host:port passes, a foreign Host does not.
        init = rpc(
            0,
            "initialize",
            {
                "protocolVersion": LEGACY_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        )
        r = await http.post(plain.url, json=init, headers={**base, "Host": "gateway.example"})
        assert r.status_code == 421
    session = await LegacySession.open(plain.url, extra_headers={"Host": f"127.0.0.1:{plain.port}"})
    assert session.session_id
    await session.delete()


async def test_prompts_resources_and_completion(plain: Running):
    session = await LegacySession.open(plain.url)
    prompts = await session.request(1, "prompts/list")
    assert {p["name"] for p in prompts["result"]["prompts"]} == {"greeting", "briefing"}
    got = await session.request(
        2, "prompts/get", {"name": "greeting", "arguments": {"name": "Ada"}}
    )
    assert got["result"]["messages"][0]["content"]["text"] == "Hello, Ada!"
    read = await session.request(3, "resources/read", {"uri": "static://hello"})
    assert read["result"]["contents"][0]["text"] == "hello"
    templates = await session.request(4, "resources/templates/list")
    assert "secret://{name}" in {t["uriTemplate"] for t in templates["result"]["resourceTemplates"]}
    done = await session.request(
        5,
        "completion/complete",
        {
            "ref": {"type": "ref/prompt", "name": "greeting"},
            "argument": {"name": "name", "value": "al"},
        },
    )
    assert done["result"]["completion"]["values"] == ["Alan", "Alonzo"]
    await session.delete()


# ---- elicitation over the call's SSE stream -------------------------------------------------


async def test_book_table_elicits_on_the_call_stream_and_answers_come_by_separate_post(
    plain: Running, module_tmp: Path
):
    session = await LegacySession.open(plain.url)
    async with session.stream(tool_call(7, "book_table", {"date": "2025-12-24"})) as call:
        assert call.status_code == 200
        assert call.headers["content-type"].startswith("text/event-stream")
        assert call.headers["mcp-session-id"] == session.session_id
        event = await call.next_event()
        ask = event.message
        assert event.id is None and event.event == "message"  # no event store: no ids
        assert is_server_request(ask, "elicitation/create")
        assert ask["id"] == 0  # the session's first server->client request
        assert ask["params"]["message"] == "How many people for 2025-12-24?"
        assert ask["params"]["mode"] == "form"
        assert ask["params"]["requestedSchema"]["properties"] == {
            "size": {"title": "Size", "type": "integer"}
        }

        answered = await session.answer(ask["id"], accept({"size": 3}))  # a new connection
        assert answered.status_code == 202 and answered.content == b""
        final = await call.response(7)
        assert text_of(final) == "Booked 3 on 2025-12-24"
        assert final["result"]["structuredContent"] == {"result": "Booked 3 on 2025-12-24"}
        assert all(e.id is None for e in call.events)
        with pytest.raises(EOFError):  # the stream ends after the response
            await call.next_event(timeout=5)

    # Decline, on the same session: the next server->client id is 1.
    async with session.stream(
        tool_call("decline-me", "book_table", {"date": "2026-01-01"})
    ) as call:
        ask = await call.next_message()
        assert ask["id"] == 1
        assert (await session.answer(1, {"action": "decline"})).status_code == 202
        assert text_of(await call.response("decline-me")) == "Not booked (decline)"
    await session.delete()

    # The request log holds the answers as they reached the server.
    answers = [
        e
        for e in request_log(module_tmp)
        if e["session_id"] == session.session_id and "result" in e
    ]
    assert [(e["id"], e["result"]) for e in answers] == [
        (0, {"action": "accept", "content": {"size": 3}}),
        (1, {"action": "decline"}),
    ]


async def test_event_store_primes_the_stream_and_resumes_after_a_hard_close(stored: Running):
    session = await LegacySession.open(stored.url)
    call_id = f"call-{uuid.uuid4().hex}"
    async with session.stream(tool_call(call_id, "book_table", {"date": "2026-02-02"})) as call:
        priming = await call.next_event()
        assert priming.is_priming and priming.retry == 1000
        uuid.UUID(priming.id)  # event ids are uuid4 strings
        asking = await call.next_event()
        assert asking.id and asking.id != priming.id
        ask = asking.message
        assert is_server_request(ask, "elicitation/create") and ask["id"] == 0
    # The `async with` closed the stream and its socket right after the question arrived.

    assert (await session.answer(0, accept({"size": 5}))).status_code == 202
    async with session.get_stream(last_event_id=asking.id) as resumed:
        assert resumed.status_code == 200
        final_event = await resumed.next_message_event()
        assert final_event.message["id"] == call_id
        assert text_of(final_event.message) == "Booked 5 on 2026-02-02"
        assert final_event.id
        # The resumed stream is then primed afresh and stays open (the client closes it).
        again = await resumed.next_event()
        assert again.is_priming and again.retry == 1000
        with pytest.raises(TimeoutError):
            await resumed.next_event(timeout=0.5)

    # From the priming event, a resume replays the question as well as the answer.
    async with session.get_stream(last_event_id=priming.id) as replay:
        first = await replay.next_message()
        second = await replay.next_message()
        assert is_server_request(first, "elicitation/create") and first["id"] == 0
        assert second["id"] == call_id and text_of(second) == "Booked 5 on 2026-02-02"
    await session.delete()


async def test_event_store_resume_before_the_answer_gets_the_result_live(stored: Running):
    session = await LegacySession.open(stored.url)
    call_id = f"live-{uuid.uuid4().hex}"
    async with session.stream(tool_call(call_id, "book_table", {"date": "2026-03-03"})) as call:
        await call.next_event()  # priming
        asking = await call.next_event()
    # The server must see the close before a resume can take the stream over; until then the
    # resume replays what it has and ends at once. Retry briefly, as a client would.
    for _ in range(50):
        async with session.get_stream(last_event_id=asking.id) as resumed:
            try:
                primed = await resumed.next_event(timeout=2)
            except EOFError:
                await asyncio.sleep(0.1)
                continue
            assert primed.is_priming
            assert (
                await session.answer(asking.message["id"], accept({"size": 9}))
            ).status_code == 202
            final = await resumed.response(call_id)
            assert text_of(final) == "Booked 9 on 2026-03-03"
            break
    else:
        pytest.fail("resume never took the stream over")
    await session.delete()


async def test_event_store_streams_are_keyed_by_request_id_across_sessions(stored: Running):
    """The SDK names a POST's event stream by its JSON-RPC id alone, and the store is shared by
    all sessions: a resume can replay another session's events when the ids collide. (Whoever
    relies on upstream resumption must keep upstream request ids unique.)"""
    shared_id = f"same-{uuid.uuid4().hex[:6]}"
    a = await LegacySession.open(stored.url)
    b = await LegacySession.open(stored.url)
    async with a.stream(tool_call(shared_id, "book_table", {"date": "A-day"})) as call_a:
        ask_a = await call_a.next_message_event()
    async with b.stream(tool_call(shared_id, "book_table", {"date": "B-day"})) as call_b:
        ask_b = await call_b.next_message_event()
    assert ask_a.message["id"] == ask_b.message["id"] == 0  # per-session counters collide too
    assert (await a.answer(0, accept({"size": 1}))).status_code == 202
    async with a.get_stream(last_event_id=ask_a.id) as own:
        foreign = await own.next_message()  # session B's question, replayed to session A
        assert foreign["params"]["message"] == "How many people for B-day?"
        assert text_of(await own.response(shared_id)) == "Booked 1 on A-day"  # stored by now
    async with b.get_stream(last_event_id=ask_b.id) as resumed:
        leaked = await resumed.next_message()
        assert leaked["id"] == shared_id
        assert text_of(leaked) == "Booked 1 on A-day"  # session A's result, on session B
    await a.delete()
    await b.delete()


async def test_without_event_store_events_carry_no_ids_and_nothing_primes(plain: Running):
    session = await LegacySession.open(plain.url)
    async with session.stream(
        tool_call(1, "progress_steps", {"steps": 2}, meta={"progressToken": "p1"})
    ) as call:
        final = await call.response(1)
        assert text_of(final) == "done 2"
    assert call.events and all(e.id is None and e.retry is None for e in call.events)
    assert not any(e.is_priming for e in call.events)
    methods = [e.message.get("method") for e in call.events]
    assert methods == ["notifications/progress", "notifications/message"] * 2 + [None]
    progress = call.events[2].message["params"]
    assert progress == {"progressToken": "p1", "progress": 2.0, "total": 2.0, "message": "step 2"}
    log = call.events[1].message["params"]
    assert log["level"] == "info" and log["data"] == "step 1 of 2"
    await session.delete()


# ---- the modes in which a 1.x server cannot elicit -----------------------------------------


async def test_json_response_answers_json_and_swallows_the_elicitation(json_mode: Running):
    session = await LegacySession.open(json_mode.url)
    assert session.initialize_content_type.startswith("application/json")
    assert session.session_id
    r = await session.post(tool_call(1, "add", {"a": 1, "b": 1}))
    assert r.headers["content-type"].startswith("application/json")
    assert r.json()["result"]["content"][0]["text"] == "2"

    before = (await LegacyStats(json_mode).get())["tools"].get("book_table", 0)
    # The tool runs and sends elicitation/create, which the JSON path drops: the POST never
    # answers. The client gives up after 2 s, which closes the connection.
    async with new_client(timeout=2.0) as http:
        with pytest.raises(httpx.ReadTimeout):
            await http.post(
                json_mode.url,
                headers=session.headers(),
                json=tool_call(2, "book_table", {"date": "2026-04-04"}),
            )
    assert (await LegacyStats(json_mode).get())["tools"]["book_table"] == before + 1
    # The session still serves other requests.
    later = await session.post(tool_call(3, "add", {"a": 2, "b": 2}))
    assert later.json()["result"]["content"][0]["text"] == "4"
    await session.delete()


async def test_stateless_has_no_session_and_cannot_complete_an_elicitation(stateless: Running):
    session = await LegacySession.open(stateless.url)
    assert session.session_id is None
    assert text_of(await session.call_tool(1, "add", {"a": 4, "b": 5})) == "9"
    # The question still goes out on the call's stream, but the answer lands on a fresh
    # throwaway transport and never reaches the waiting tool.
    async with session.stream(tool_call(2, "book_table", {"date": "2026-05-05"})) as call:
        ask = await call.next_message()
        assert is_server_request(ask, "elicitation/create") and ask["id"] == 0
        answered = await session.answer(0, accept({"size": 2}))
        assert answered.status_code == 202
        with pytest.raises(TimeoutError):
            await call.next_event(timeout=2.0)


async def test_idle_timeout_expires_a_session_whose_stream_was_dropped(idle: Running):
    session = await LegacySession.open(idle.url)
    async with session.stream(tool_call(1, "book_table", {"date": "2026-06-06"})) as call:
        ask = await call.next_message()
    # Nothing of this session is in flight now: after 2 s it is gone with its pending question.
    await asyncio.sleep(3.5)
    r = await session.answer(ask["id"], accept({"size": 4}))
    assert r.status_code == 404, r.text
    assert r.json()["error"]["message"] == "Session not found"


async def test_an_open_stream_keeps_an_idle_session_alive(idle: Running):
    session = await LegacySession.open(idle.url)
    async with session.stream(tool_call(1, "book_table", {"date": "2026-07-07"})) as call:
        ask = await call.next_message()
        await asyncio.sleep(3.0)  # longer than the idle timeout, but the POST is in flight
        assert (await session.answer(ask["id"], accept({"size": 6}))).status_code == 202
        assert text_of(await call.response(1)) == "Booked 6 on 2026-07-07"
    await session.delete()


# ---- every kind of server->client request over raw HTTP ------------------------------------


async def test_sampling_travels_on_the_call_stream(plain: Running):
    session = await LegacySession.open(plain.url)
    async with session.stream(tool_call(1, "ask_model", {"question": "2+2?"})) as call:
        ask = await call.next_message()
        assert is_server_request(ask, "sampling/createMessage")
        assert ask["params"]["messages"] == [
            {"role": "user", "content": {"type": "text", "text": "2+2?"}}
        ]
        assert ask["params"]["maxTokens"] == 50
        reply = {"role": "assistant", "content": {"type": "text", "text": "4"}, "model": "m"}
        assert (await session.answer(ask["id"], reply)).status_code == 202
        assert text_of(await call.response(1)) == "Model said: 4"
    await session.delete()


ROOTS = {"roots": [{"uri": "file:///work", "name": "work"}, {"uri": "file:///tmp"}]}


async def test_roots_list_goes_to_the_standalone_get_stream(plain: Running):
    session = await LegacySession.open(plain.url)
    async with (
        session.get_stream() as standalone,
        session.stream(tool_call(1, "show_roots")) as call,
    ):
        ask = await standalone.next_message()
        assert is_server_request(ask, "roots/list") and "params" not in ask
        assert (await session.answer(ask["id"], ROOTS)).status_code == 202
        assert text_of(await call.response(1)) == "Roots: file:///work, file:///tmp"
        assert all(e.message is None or "method" not in e.message for e in call.events)
    await session.delete()


async def test_roots_list_with_no_get_stream_is_lost(plain: Running):
    session = await LegacySession.open(plain.url)
    async with session.stream(tool_call(1, "show_roots")) as call:
        with pytest.raises(TimeoutError):  # the request went nowhere; the tool waits on
            await call.next_event(timeout=1.5)
        async with session.get_stream() as late:  # a GET opened later does not get it either
            with pytest.raises(TimeoutError):
                await late.next_event(timeout=1.0)
    await session.delete()


async def test_roots_in_call_travels_on_the_call_stream(plain: Running):
    session = await LegacySession.open(plain.url)
    async with session.stream(tool_call(1, "roots_in_call")) as call:
        ask = await call.next_message()
        assert is_server_request(ask, "roots/list")
        assert (await session.answer(ask["id"], ROOTS)).status_code == 202
        assert text_of(await call.response(1)) == "Roots: file:///work, file:///tmp"
    await session.delete()


async def test_three_questions_in_sequence(plain: Running):
    session = await LegacySession.open(plain.url)
    async with session.stream(tool_call(1, "three_questions", {"topic": "ops"})) as call:
        answers = [{"colour": "red"}, {"number": 42}, {"ship": True}]
        for expected_id, content in enumerate(answers):
            ask = await call.next_message()
            assert is_server_request(ask, "elicitation/create") and ask["id"] == expected_id
            assert list(ask["params"]["requestedSchema"]["properties"]) == list(content)
            assert (await session.answer(ask["id"], accept(content))).status_code == 202
        assert text_of(await call.response(1)) == "ops: red, 42, True"
    await session.delete()


async def test_versioned_question_changes_after_the_first_execution(plain: Running):
    k = key()
    session = await LegacySession.open(plain.url)
    for run, version in enumerate(["v1", "v2", "v2"]):
        async with session.stream(tool_call(run, "versioned_question", {"key": k})) as call:
            ask = await call.next_message()
            assert ask["params"]["message"] == f"Question {version} for {k}?"
            assert (
                await session.answer(ask["id"], accept({"answer": f"a{run}"}))
            ).status_code == 202
            assert text_of(await call.response(run)) == f"{k}: answered {version} with a{run}"
    assert (await LegacyStats(plain).get())["versioned"][k] == 3
    await session.delete()


async def test_side_effect_counts_before_it_asks(plain: Running):
    k = key()
    stats = LegacyStats(plain)
    session = await LegacySession.open(plain.url)
    async with session.stream(tool_call(1, "side_effect", {"key": k})) as call:
        ask = await call.next_message()
        assert (await stats.get())["side_effects"][k] == 1  # counted while the question waits
        assert (await session.answer(ask["id"], {"action": "decline"})).status_code == 202
        assert text_of(await call.response(1)) == f"{k}: confirmed=decline runs=1"
    async with session.stream(tool_call(2, "side_effect", {"key": k})) as call:
        ask = await call.next_message()
        assert (await session.answer(ask["id"], accept({"confirm": True}))).status_code == 202
        assert text_of(await call.response(2)) == f"{k}: confirmed=True runs=2"
    assert (await stats.get())["side_effects"][k] == 2
    await session.delete()


async def test_ping_arrives_as_a_server_request_and_must_be_answered(plain: Running):
    session = await LegacySession.open(plain.url)
    async with (
        session.get_stream() as standalone,
        session.stream(tool_call(1, "ping_then_ask")) as call,
    ):
        ping = await standalone.next_message()
        assert ping == {"jsonrpc": "2.0", "id": 0, "method": "ping"}
        with pytest.raises(TimeoutError):  # nothing more happens until the ping is answered
            await call.next_event(timeout=0.5)
        assert (await session.answer(0, {})).status_code == 202
        ask = await call.next_message()
        assert is_server_request(ask, "elicitation/create") and ask["id"] == 1
        assert (await session.answer(1, accept({"answer": "yes"}))).status_code == 202
        assert text_of(await call.response(1)) == "yes"
    await session.delete()


async def test_url_mode_elicitation(plain: Running):
    session = await LegacySession.open(plain.url)
    async with session.stream(tool_call(1, "url_consent")) as call:
        ask = await call.next_message()
        params = ask["params"]
        assert params["mode"] == "url" and params["url"].startswith("https://consent.example/")
        assert (await session.answer(ask["id"], {"action": "accept"})).status_code == 202
        done = await call.next_message()
        assert done["method"] == "notifications/elicitation/complete"
        assert done["params"]["elicitationId"] == params["elicitationId"]
        assert text_of(await call.response(1)) == "URL consent: accept"
    failed = await session.call_tool(2, "url_required")
    assert failed["error"]["code"] == -32042
    assert failed["error"]["data"]["elicitations"][0]["elicitationId"] == "auth-001"
    await session.delete()


async def test_prompt_and_resource_template_elicit_too(plain: Running):
    session = await LegacySession.open(plain.url)
    async with session.stream(
        rpc(1, "prompts/get", {"name": "briefing", "arguments": {"topic": "MRTR"}})
    ) as call:
        ask = await call.next_message()
        assert is_server_request(ask, "elicitation/create")
        assert (await session.answer(ask["id"], accept({"audience": "ops"}))).status_code == 202
        final = await call.response(1)
        assert (
            final["result"]["messages"][0]["content"]["text"] == "Write a briefing on MRTR for ops."
        )
    async with session.stream(rpc(2, "resources/read", {"uri": "secret://vault"})) as call:
        ask = await call.next_message()
        assert ask["params"]["message"] == "PIN for vault?"
        assert (await session.answer(ask["id"], accept({"pin": "1234"}))).status_code == 202
        final = await call.response(2)
        assert final["result"]["contents"][0]["text"] == "secret vault unlocked with pin 1234"
    await session.delete()


async def test_stats_count_what_reached_the_process(plain: Running):
    stats = LegacyStats(plain)
    before = await stats.get()
    session = await LegacySession.open(plain.url)
    await session.call_tool(1, "slow", {"seconds": 0.1})
    after = await stats.get()
    assert after["instance"] == "legacy-a"
    assert after["sessions_initialized"] == before["sessions_initialized"] + 1
    assert after["methods"]["initialize"] == before["methods"]["initialize"] + 1
    assert after["methods"]["tools/call"] == before["methods"]["tools/call"] + 1
    assert after["tools"]["slow"] == before["tools"].get("slow", 0) + 1
    assert after["hosts"][f"127.0.0.1:{plain.port}"] > 0
    await session.delete()


# ---- the real mcp 2.x client ---------------------------------------------------------------


async def test_sdk_client_pinned_to_2026_cannot_talk_to_a_legacy_server(plain: Running):
    http = httpx2.AsyncClient(timeout=10)
    with pytest.raises(BaseException) as raised:  # the client's task groups wrap the error
        async with (
            asyncio.timeout(20),
            http,
            Client(
                streamable_http_client(plain.url, http_client=http), mode="2026-07-28"
            ) as client,
        ):
            await client.call_tool("add", {"a": 1, "b": 2})
    errors = leaf_errors(raised.value)
    assert [type(e) for e in errors] == [MCPError], errors
    assert str(errors[0]) == "Bad Request: Missing session ID"


async def test_sdk_client_in_legacy_mode_works_with_callbacks(plain: Running):
    async def on_elicit(ctx, params):
        return ElicitResult(action="accept", content={"size": 6})

    async def on_sample(ctx, params):
        return CreateMessageResult(
            role="assistant", content=TextContent(type="text", text="hi"), model="m"
        )

    async def on_roots(ctx):
        return ListRootsResult(roots=[Root(uri="file:///srv")])

    http = httpx2.AsyncClient(timeout=10)
    async with (
        asyncio.timeout(20),
        http,
        Client(
            streamable_http_client(plain.url, http_client=http),
            mode="legacy",
            elicitation_callback=on_elicit,
            sampling_callback=on_sample,
            list_roots_callback=on_roots,
        ) as client,
    ):
        booked = await client.call_tool("book_table", {"date": "2026-09-09"})
        assert booked.content[0].text == "Booked 6 on 2026-09-09"
        sampled = await client.call_tool("ask_model", {"question": "?"})
        assert sampled.content[0].text == "Model said: hi"
        # The SDK client holds the standalone GET stream, so roots/list reaches it.
        roots = await client.call_tool("show_roots", {})
        assert roots.content[0].text == "Roots: file:///srv"
