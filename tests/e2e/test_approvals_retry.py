"""Approvals on 2026-07-28, which lets no server ask mid-call: the call's result is `input_required`
(the question, as an elicitation), and the client's retry brings the answer with a request state
sealed to exactly that call. The official Python client (mcp 2.x, `mode="auto"` adopts 2026-07-28)
drives the retry through its elicitation callback; a replay with other arguments, or of an answer
already used, or past the wait, runs nothing. Real Chromium, real agent-browser, the demo site."""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any

import anyio
import pytest
from test_approvals import Person, approvals, paid, policy, records

pytestmark = pytest.mark.chromium


async def call(client: Any, sid: str, argv: list[str], **retry: Any) -> Any:
    """One call on the session (not the driver): the result may be `input_required`."""
    return await client.session.call_tool(
        "browser-shell", {"session_id": sid, "argv": argv}, allow_input_required=True, **retry
    )


def reply_of(result: Any) -> dict[str, Any]:
    assert getattr(result, "structured_content", None) is not None, f"not a tool result: {result!r}"
    return result.structured_content


async def checkout(client: Any, web: Any, sid: str) -> dict[str, str]:
    for argv in (["open", web.url("/checkout")], ["snapshot", "-i"]):
        result = await client.call_tool("browser-shell", {"session_id": sid, "argv": argv})
        assert reply_of(result)["exit_code"] == 0, reply_of(result)
    snap = json.loads(reply_of(result)["stdout"])["snapshot"]
    return {name: ref for name, ref in re.findall(r'"([^"]+)" \[ref=(e\d+)\]', snap)}


def run_with_client(cfg: Any, person: Person, body: Any) -> Any:
    """Start the server on `cfg` under the official client at its newest revision and run `body`."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    cfg.base.mkdir(parents=True, exist_ok=True)
    cfg.write_policy()
    params = StdioServerParameters(command=str(cfg.server_bin), args=cfg.args(), env=cfg.env())

    async def go() -> Any:
        with open(cfg.stderr_log, "a") as errlog, anyio.fail_after(120):
            async with Client(stdio_client(params, errlog=errlog), mode="auto", elicitation_callback=person) as client:
                assert client.session.protocol_version == "2026-07-28", client.session.protocol_version
                return await body(client)

    return anyio.run(go)


@pytest.mark.parametrize("answer", ["approve", "decline"])
def test_a_2026_07_28_client_is_asked_by_the_result_and_its_retry_runs_the_call(
    server_config, web, binaries, answer: str
) -> None:
    cfg = server_config(tag="apr")
    cfg.policy_json = policy(30)
    person, sid, since = Person(answer), f"apr-{answer}", len(web.seen_paths())

    async def body(client: Any) -> dict[str, Any]:
        refs = await checkout(client, web, sid)
        # The client's own driver: it answers the question through its elicitation callback and retries.
        done = await client.call_tool("browser-shell", {"session_id": sid, "argv": ["click", "@" + refs["Pay 12 €"]]})
        if reply_of(done)["exit_code"] == 0:
            waited = await client.call_tool("browser-shell", {"session_id": sid, "argv": ["wait", "--url", "**/paid**"]})
            assert reply_of(waited)["exit_code"] == 0, reply_of(waited)
        return reply_of(done)

    reply = run_with_client(cfg, person, body)
    (asked,) = person.shown
    assert "Pay 12 €" in asked.message and "Checkout" in asked.message, asked.message
    trail = approvals(cfg.audit_log)
    assert [a["outcome"] for a in trail] == ["requested", "granted" if answer == "approve" else "denied"], trail
    assert trail[0]["approval"]["channel"] == "input_required", trail[0]
    by = trail[1]["approval"]["by"]
    assert by["channel"] == "input_required" and by["client"].startswith("mcp/"), by
    if answer == "approve":
        assert reply["exit_code"] == 0, reply
        intent = next(r for r in records(cfg.audit_log) if r.get("phase") == "intent" and r["argv"][0] == "click")
        assert intent["approval"]["id"] == trail[0]["approval"]["id"], intent
        assert paid(web, since)
    else:
        assert reply["exit_code"] == 126 and "approval.denied" in reply["stderr"], reply
        assert not paid(web, since)
    verified = subprocess.run(
        [str(binaries.server), "audit", "verify", str(cfg.audit_log)], capture_output=True, text=True
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_an_answer_is_bound_to_its_call_used_once_and_expires(server_config, web) -> None:
    """The retry's state opens only for the same session, arguments and timeout; once; within the wait."""
    from mcp import types

    cfg = server_config(tag="aps")
    cfg.policy_json = policy(3)
    sid, since = "aps-1", len(web.seen_paths())
    yes = {"approval": types.ElicitResult(action="accept", content={"approve": True}).model_dump(by_alias=True, exclude_none=True)}

    async def body(client: Any) -> dict[str, Any]:
        refs = await checkout(client, web, sid)
        pay, note = ["click", "@" + refs["Pay 12 €"]], ["click", "@" + refs["Note"]]
        first = await call(client, sid, pay)
        assert isinstance(first, types.InputRequiredResult), first
        assert list(first.input_requests) == ["approval"], first.input_requests
        state = first.request_state
        # The agent's own arguments cannot carry an answer; a replay for another call opens nothing.
        seen = {
            "other_argv": reply_of(await call(client, sid, note, input_responses=yes, request_state=state)),
            "other_session": reply_of(await call(client, "aps-2", pay, input_responses=yes, request_state=state)),
            "altered": reply_of(await call(client, sid, pay, input_responses=yes, request_state=state[:-2] + "AA")),
            "paid_before_yes": paid(web, since),
        }
        seen["granted"] = reply_of(await call(client, sid, pay, input_responses=yes, request_state=state))
        seen["replayed"] = reply_of(await call(client, sid, pay, input_responses=yes, request_state=state))
        # Asked again and never answered: the request expires on its own, and a late answer runs nothing.
        second = await call(client, sid, pay)
        assert isinstance(second, types.InputRequiredResult), second
        await anyio.sleep(3.5)
        seen["late"] = reply_of(await call(client, sid, pay, input_responses=yes, request_state=second.request_state))
        return seen

    seen = run_with_client(cfg, Person("approve"), body)
    for case in ("other_argv", "other_session", "altered"):
        assert seen[case]["exit_code"] == 126 and "approval.denied" in seen[case]["stderr"], (case, seen[case])
        assert "not issued by this server for this call" in seen[case]["stderr"], (case, seen[case])
    assert seen["paid_before_yes"] is False
    assert seen["granted"]["exit_code"] == 0, seen["granted"]
    assert seen["replayed"]["exit_code"] == 126 and "answered already" in seen["replayed"]["stderr"], seen["replayed"]
    assert seen["late"]["exit_code"] == 126 and "approval.expired" in seen["late"]["stderr"], seen["late"]
    outcomes = [a["outcome"] for a in approvals(cfg.audit_log)]
    assert outcomes == ["requested", "granted", "requested", "expired"], outcomes
    denied = [r for r in records(cfg.audit_log) if r.get("phase") == "denied"]
    assert [r["rule"] for r in denied] == ["approval.denied"] * 4 + ["approval.expired"], denied
    clicks = [r for r in records(cfg.audit_log) if r.get("phase") == "intent" and r["argv"][0] == "click"]
    assert len(clicks) == 1, clicks


def test_a_question_still_waiting_when_the_server_stops_ends_in_the_trail(server_config, web, binaries) -> None:
    """No retry can answer a question once its server is gone (the state's key dies with it): the
    request ends in an `expired` record that says so, before the server's `stopped` record."""
    from mcp import types

    cfg = server_config(tag="apz")
    cfg.policy_json = policy(60)
    sid, since = "apz-1", len(web.seen_paths())

    async def body(client: Any) -> None:
        refs = await checkout(client, web, sid)
        asked = await call(client, sid, ["click", "@" + refs["Pay 12 €"]])
        assert isinstance(asked, types.InputRequiredResult), asked

    run_with_client(cfg, Person("approve"), body)
    assert paid(web, since) is False
    outcomes = [(a["outcome"], a.get("approval", {}).get("why")) for a in approvals(cfg.audit_log)]
    assert outcomes == [("requested", None), ("expired", "the server stopped before the client's retry came")], outcomes
    ends = [r.get("outcome") for r in records(cfg.audit_log) if r.get("phase") in ("approval", "lifecycle")]
    assert ends.index("expired") < ends.index("stopped"), ends
    run = subprocess.run([str(binaries.server), "audit", "verify", str(cfg.audit_log)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
