"""Real browsing through browser-shell: the happy path, and free text that looks like flags."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

import harness
from server import describe, unmarked

pytestmark = pytest.mark.chromium

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

GLOBAL_FLAG_NAMES = (
    "--profile --restore --restore-save --restore-check-url --restore-check-text --restore-check-fn "
    "--session-name --state --auto-connect --headers --session --namespace --executable-path "
    "--extension --init-script --enable --args --user-agent --proxy --proxy-bypass "
    "--ignore-https-errors --ca-cert --no-ca-cert --use-system-ca --allow-file-access "
    "--hide-scrollbars -p --provider --device --json --annotate --screenshot-dir "
    "--screenshot-quality --screenshot-format --input-mode --headed --webgpu --no-webmcp --cdp "
    "--cdp-headers --pin-tab --no-pin-tab --color-scheme --download-path --content-boundaries "
    "--max-output --allowed-domains --action-policy --confirm-actions --confirm-interactive "
    "--idle-timeout --engine --no-auto-dialog --model -v --verbose -q --quiet --config --debug "
    "--version -V --help -h"
).split()


def _assert_png_under(path_str: str, output_dir: Path) -> Path:
    path = Path(path_str)
    assert path.is_absolute(), f"screenshot path is not absolute: {path_str!r}"
    real = Path(os.path.realpath(path))
    out = Path(os.path.realpath(output_dir))
    assert out in real.parents, f"screenshot {real} is not under the output dir {out}"
    assert real.is_file(), f"screenshot file {real} does not exist"
    with open(real, "rb") as fh:
        head = fh.read(8)
    assert head == PNG_MAGIC, f"{real} does not start with the PNG signature: {head!r}"
    return real


def test_the_smoke_flow_submits_the_filled_value_and_screenshots_land_per_session(server, web: harness.WebServer) -> None:
    sid = "smoke-1"
    value = "hello browser-shell"
    form_url = web.url("/form")
    submitted_before = len(web.submitted())

    opened = server.ok(sid, ["open", form_url])
    assert opened.get("url") == form_url, opened

    snap = server.ok(sid, ["snapshot", "-i"])
    assert "[ref=" in snap.get("snapshot", "") or "ref=e" in snap.get("snapshot", ""), snap
    refs = snap.get("refs")
    assert isinstance(refs, dict) and refs, f"snapshot -i has no refs: {snap}"
    # A ref's name is page text: it is in the marked snapshot text, not in `refs`.
    assert all("name" not in node for node in refs.values()), refs
    query_refs = re.findall(r'textbox "Query" \[ref=(e\d+)\]', snap["snapshot"])
    assert len(query_refs) == 1 and refs[query_refs[0]] == {"role": "textbox"}, snap
    ref = "@" + query_refs[0]

    server.ok(sid, ["fill", ref, value])
    assert server.ok(sid, ["get", "value", "#q"]) == {"value": value}
    server.ok(sid, ["click", "#free"])  # focus elsewhere, then come back through the ref
    server.ok(sid, ["click", ref])
    server.ok(sid, ["press", "Enter"])
    server.ok(sid, ["wait", "--url", "**/submit**"], 20)

    url = server.ok(sid, ["get", "url"])["url"]
    assert "/submit?q=hello" in url, url
    assert web.submitted()[submitted_before:] == [value], (
        f"HTTP server recorded {web.submitted()[submitted_before:]!r}, expected exactly [{value!r}]"
    )
    assert server.ok(sid, ["get", "title"]) == {"title": "Submitted"}

    generated = server.ok(sid, ["screenshot"])
    auto_png = _assert_png_under(generated["path"], server.cfg.output_dir)

    named = server.ok(sid, ["screenshot", "shot.png"])
    named_png = _assert_png_under(named["path"], server.cfg.output_dir)
    assert named_png.name == "shot.png", named_png
    assert named_png.parent == auto_png.parent, (
        f"generated and named screenshots landed in different session dirs: {auto_png} vs {named_png}"
    )
    assert named_png.parent != Path(os.path.realpath(server.cfg.output_dir)), (
        "screenshots must go to a per-session directory under the output dir"
    )

    is_error, reply = server.call(sid, ["close"])
    assert not is_error and reply["exit_code"] == 0, describe(reply)


def test_global_flag_names_as_fill_text_change_nothing(server, web: harness.WebServer) -> None:
    sid = "flags-a"
    other = "flags-b"
    form_url = web.url("/form")
    server.ok(sid, ["open", form_url])

    failures: list[str] = []
    for name in GLOBAL_FLAG_NAMES:
        is_error, reply = server.call(sid, ["fill", "#free", name])
        if is_error or reply["exit_code"] != 0:
            failures.append(f"fill #free {name!r}: {describe(reply)}")
            continue
        is_error, reply = server.call(sid, ["get", "value", "#free"])
        if is_error or reply["exit_code"] != 0:
            failures.append(f"get value after fill {name!r}: {describe(reply)}")
            continue
        try:
            got = unmarked(json.loads(reply["stdout"]))
        except ValueError:
            failures.append(f"get value after fill {name!r}: stdout is not JSON: {reply['stdout']!r}")
            continue
        if got != {"value": name}:
            failures.append(f"fill {name!r} read back as {got!r}")
    assert not failures, f"{len(failures)} of {len(GLOBAL_FLAG_NAMES)} flag names misbehaved:\n" + "\n".join(failures)

    # Same session: still on its page, output still machine-readable JSON.
    is_error, reply = server.call(sid, ["get", "url"])
    assert not is_error and reply["exit_code"] == 0, describe(reply)
    assert json.loads(reply["stdout"]) == {"url": form_url}, reply["stdout"]

    # A different session id has a page of its own: it never saw /form.
    is_error, reply = server.call(other, ["get", "url"])
    assert not is_error and reply["exit_code"] == 0, describe(reply)
    other_url = json.loads(reply["stdout"])["url"]
    assert other_url != form_url, (
        f"session {other!r} sees session {sid!r}'s page {other_url!r}: sessions are not isolated"
    )


def test_sessions_have_their_own_pages(server, web: harness.WebServer) -> None:
    """Navigating in one session must not move another session's page."""
    server.ok("iso-a", ["open", web.url("/form")])
    server.ok("iso-b", ["open", web.url("/next")])
    assert server.ok("iso-a", ["get", "url"]) == {"url": web.url("/form")}
    assert server.ok("iso-b", ["get", "url"]) == {"url": web.url("/next")}
    assert server.ok("iso-a", ["get", "title"]) == {"title": "Form page"}


def test_numeric_and_boolean_argv_items_are_accepted(server, web: harness.WebServer) -> None:
    """argv items may be numbers (and booleans): `["wait", 100]` runs like `["wait", "100"]`."""
    server.ok("num-1", ["open", web.url("/form")])
    is_error, reply = server.call("num-1", ["wait", 100])
    assert not is_error and reply["exit_code"] == 0, describe(reply)
    is_error, reply = server.call("num-1", ["fill", "#free", True])
    assert not is_error and reply["exit_code"] == 0, describe(reply)
    assert server.ok("num-1", ["get", "value", "#free"]) == {"value": "true"}


def test_a_background_session_is_brought_to_the_front_before_it_acts(server, web: harness.WebServer) -> None:
    """Chromium renders only a window's visible tab; an action in a hidden one waits out
    agent-browser's 5 s timeout. browser-shell brings the session's own tab forward as each such
    command goes out, so within a 3 s tool timeout the click is done (without it: 124)."""
    server.ok("bg-a", ["open", web.url("/form")])
    server.ok("bg-b", ["open", web.url("/next")])  # bg-b's tab is now the visible one
    is_error, reply = server.call("bg-a", ["click", "#q"], 3)
    assert not is_error and reply["exit_code"] == 0, describe(reply)
    is_error, reply = server.call("bg-b", ["screenshot", "bg-b.png"], 3)  # and back
    assert not is_error, describe(reply)
    _assert_png_under(json.loads(reply["stdout"])["path"], server.cfg.output_dir)
    # Foregrounding did not move either session's page.
    assert server.ok("bg-a", ["get", "url"]) == {"url": web.url("/form")}
    assert server.ok("bg-b", ["get", "url"]) == {"url": web.url("/next")}


def test_audit_log_records_intent_before_outcome_and_never_the_filled_text(
    server, web: harness.WebServer
) -> None:
    secret = "s3cret-" + "x" * 12
    sid = "audit-1"
    server.ok(sid, ["open", web.url("/form")])
    server.ok(sid, ["fill", "#free", secret])
    server.call(sid, ["eval", "1"])  # refused
    records = [json.loads(line) for line in server.cfg.audit_log.read_text().splitlines()]
    mine = [r for r in records if r.get("session_id") == sid]
    phases: dict[str, list[str]] = {}
    for record in mine:
        phases.setdefault(record["call_id"], []).append(record["phase"])
    # A page-changing call's evidence (the default `--evidence digests`) is written after its reply,
    # so it may not be there yet; when it is, it follows the call's outcome.
    assert all(p[2:] in ([], ["evidence"]) for p in phases.values()), phases
    phases = {call: p[:2] for call, p in phases.items()}
    assert sorted(phases.values()) == sorted([["intent", "outcome"], ["intent", "outcome"], ["denied"]]), phases
    denied = next(r for r in mine if r["phase"] == "denied")
    assert denied["rule"] == "subcommand.denied" and denied["verdict"] == "denied", denied
    fill_intent = next(r for r in mine if r["phase"] == "intent" and r["argv"][0] == "fill")
    redacted = fill_intent["argv"][2]
    assert redacted["redacted"] is True and redacted["len"] == len(secret), fill_intent
    assert len(redacted["mac"]) == 16 and secret not in json.dumps(fill_intent), fill_intent
    assert secret not in server.cfg.audit_log.read_text()
    for prev, cur in zip(records, records[1:]):
        assert cur["prev_hash"] == prev["hash"] and cur["seq"] == prev["seq"] + 1, (prev, cur)
