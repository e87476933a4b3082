"""Per-action evidence (`--evidence images`): after each call that can change the page, an `evidence`
record names the page before and after (URL, title, an image kept beside the log under its SHA-256)
and the element acted on, as the session's last snapshot named it; `audit verify` holds every image
to its digest. A secret typed into a field is blacked out of the image; a page that shows a secret is
withheld. Real Chromium, real agent-browser, the demo site on 127.0.0.1."""

from __future__ import annotations

import json
import re
import struct
import subprocess
import time
import zlib
from pathlib import Path
from typing import Any

import harness
import pytest
from test_report import SHOTS, cdp
from test_secrets import VALUE as SECRET
from test_secrets import secrets_file

pytestmark = pytest.mark.chromium



def records(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def evidence_of(log: Path, want: int = 0) -> list[dict[str, Any]]:
    """The evidence records, once there are at least `want`: a call's screenshot and record are made
    after its session's turn is given back."""
    deadline = time.monotonic() + 15
    while True:
        found = [r for r in records(log) if r.get("phase") == "evidence"]
        if len(found) >= want or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def store_of(log: Path) -> Path:
    return Path(f"{log}.evidence")


def verify(server_bin: Path, log: Path) -> subprocess.CompletedProcess[str]:
    """`audit verify <log>*`, as README shows it: the glob takes in the image store too."""
    files = sorted(str(p) for p in log.parent.glob(log.name + "*"))
    return subprocess.run([str(server_bin), "audit", "verify", *files], capture_output=True, text=True, timeout=60)


def decode_png(data: bytes) -> tuple[int, int, list[list[tuple[int, ...]]]]:
    """An 8-bit, non-interlaced RGB or RGBA PNG as rows of pixels (what Chromium and the store write)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert header is not None
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and interlace == 0 and color in (2, 6), header
    channels = 3 if color == 2 else 4
    raw, stride = zlib.decompress(idat), width * channels
    rows: list[bytearray] = []
    prev = bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b, c = prev[i], prev[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(line)
        prev = line
    pixels = [[tuple(row[x * channels : x * channels + 3]) for x in range(width)] for row in rows]
    return width, height, pixels


def test_the_smoke_flow_leaves_a_verified_replayable_trail_of_images(
    start_server, web: harness.WebServer, binaries: Any, chromium: harness.Chromium
) -> None:
    srv = start_server(extra_args=["--evidence", "images"])
    log, sid = srv.cfg.audit_log, "ev-1"
    # Each action's screenshot is taken after its turn is given back: waiting for its record before
    # the next action keeps the next one from racing it (a raced image says so; not tested here).
    srv.ok(sid, ["open", web.url("/form")])
    snap = srv.ok(sid, ["snapshot", "-i"])
    (search,) = re.findall(r'button "Search" \[ref=(e\d+)\]', snap["snapshot"])
    (query,) = re.findall(r'textbox "Query" \[ref=(e\d+)\]', snap["snapshot"])
    evidence_of(log, 1)
    srv.ok(sid, ["fill", f"@{query}", "hello"])
    evidence_of(log, 2)
    srv.ok(sid, ["click", f"@{search}"])
    evidence_of(log, 3)
    srv.ok(sid, ["wait", "--url", "**/submit**"], 20)
    srv.ok(sid, ["get", "url"])

    trail = evidence_of(log, 4)
    started = next(r for r in records(log) if r.get("outcome") == "started")
    assert started["detail"]["limits"]["evidence"] == "images", started["detail"]["limits"]
    # `wait` is evidence too: it is where a navigation the page started (a form's) ends.
    assert [e["evidence"]["subcommand"] for e in trail] == ["open", "fill", "click", "wait"], trail
    outcomes = {r["call_id"]: r for r in records(log) if r.get("phase") == "outcome"}
    assert all(e["call_id"] in outcomes and e["session_id"] == sid for e in trail), trail
    opened, filled, clicked, waited = (e["evidence"] for e in trail)
    assert opened["after"]["url"] == web.url("/form") and opened["after"]["title"] == "Form page", opened
    assert "unseen" in opened["before"], opened
    # A call's "before" is what the session's previous action left, named by its call.
    assert filled["before"]["after_call"] == trail[0]["call_id"], filled
    assert filled["before"]["image"] == opened["after"]["image"], filled
    assert filled["element"] == {"ref": query, "role": "textbox", "name": "Query"}, filled
    assert clicked["element"] == {"ref": search, "role": "button", "name": "Search"}, clicked
    # What was typed is in no record in clear: a URL carries the intent's marker for it.
    assert "/submit?q=[typed:len=5:mac=" in waited["after"]["url"] and waited["after"]["title"] == "Submitted", waited
    assert "hello" not in json.dumps(trail), trail

    images = {look["image"]["sha256"] for e in trail for look in (e["evidence"]["before"], e["evidence"]["after"]) if "image" in look}
    # The form, the form filled, the result page.
    assert len(images) == 3 and not any("image_raced" in json.dumps(e) for e in trail), trail
    store = store_of(log)
    for digest in images:
        data = (store / f"{digest}.png").read_bytes()
        width, height, _ = decode_png(data)
        assert 0 < width <= 1000 and 0 < height <= 1000, (width, height)
        assert oct((store / f"{digest}.png").stat().st_mode & 0o777) == "0o600"
    assert oct(store.stat().st_mode & 0o777) == "0o700"

    run = verify(srv.cfg.server_bin, log)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "images: 3 named by the records, present and unaltered" in run.stdout, run.stdout

    # The report replays the session, in Chromium: every image loads, in the order of the calls, and
    # the clicked element is named by its role and name.
    run = subprocess.run(
        [str(binaries.server), "audit", "report", str(log), "--format", "html", "--session", sid],
        capture_output=True, text=True, timeout=60,
    )
    assert run.returncode == 0, run.stderr
    SHOTS.mkdir(parents=True, exist_ok=True)
    page, errors = SHOTS / "report-replay.html", []
    page.write_text(run.stdout)
    steps, loaded, clicked_shown = cdp(
        chromium,
        page,
        [
            "Array.from(document.querySelectorAll('.replay .step'), s => s.querySelector('b').textContent)",
            "Array.from(document.images, i => i.complete && i.naturalWidth > 0 && i.src.startsWith('data:image/png'))",
            "document.querySelector('.replay .step[data-call=\"%s\"] [data-element]').textContent" % trail[2]["call_id"],
        ],
        SHOTS / "report-replay.png",
        errors,
    )
    assert errors == [], errors
    assert steps == ["open", "snapshot", "fill", "click", "wait", "get"], steps
    assert len(loaded) == 2 * 4 - 1 and all(loaded), (loaded, trail)  # the first `open` has no "before" image
    assert "button" in clicked_shown and "Search" in clicked_shown, clicked_shown

    # OCSF (as OTLP, a copy of the record) carries the digests, never the images.
    run = subprocess.run(
        [str(binaries.server), "audit", "report", str(log), "--format", "ocsf"], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    events = [json.loads(line) for line in run.stdout.splitlines()]
    shown = [e for e in events if e.get("unmapped", {}).get("phase") == "evidence"]
    assert len(shown) == len(trail), shown
    digests = {look["image"]["sha256"] for e in shown for look in e["unmapped"]["evidence"].values() if "image" in look}
    assert digests == images and max(len(line) for line in run.stdout.splitlines()) < 4096

    # An edited image, then a deleted one: NOT INTACT, exit 1, naming it.
    victim = store / f"{waited['after']['image']['sha256']}.png"
    original = victim.read_bytes()
    victim.write_bytes(original[:-8] + b"\0" * 8)
    run = verify(srv.cfg.server_bin, log)
    assert run.returncode == 1 and "altered" in run.stdout, run.stdout
    victim.unlink()
    run = verify(srv.cfg.server_bin, log)
    assert run.returncode == 1 and "missing" in run.stdout, run.stdout
    victim.write_bytes(original)
    assert verify(srv.cfg.server_bin, log).returncode == 0


def inside(box: tuple[int, int, int, int], x: int, y: int) -> bool:
    bx, by, bw, bh = box
    return bx <= x < bx + bw and by <= y < by + bh


def dark_share(pixels: list[list[tuple[int, ...]]], box: tuple[int, int, int, int]) -> float:
    """The share of pure black pixels in box (x, y, w, h) of an image."""
    x, y, w, h = box
    area = [pixels[j][i] for j in range(y, y + h) for i in range(x, x + w)]
    return sum(1 for p in area if p == (0, 0, 0)) / len(area)


def test_a_typed_secret_is_blacked_out_and_a_page_showing_it_is_withheld(start_server, web: harness.WebServer) -> None:
    srv = start_server(extra_args=["--evidence", "images", "--secrets", str(secrets_file([f"127.0.0.1:{web.port}"]))])
    log, sid = srv.cfg.audit_log, "ev-secret"
    srv.ok(sid, ["open", web.url("/form")])
    srv.ok(sid, ["fill", "#q", "plain words"])
    # Its screenshot is taken before the next call types the secret (else that image is masked too,
    # and says it raced the next call).
    evidence_of(log, 2)
    srv.ok(sid, ["fill", "#q", "{{secret:login}}"])
    plain, secret = (e["evidence"]["after"] for e in evidence_of(log, 3)[1:3])
    assert plain["image"]["masked_fields"] == 0 and secret["image"]["masked_fields"] == 1, (plain, secret)

    # The field's place, as the record names the mask (in the image's own pixels), is black where
    # the secret is typed and not where plain words are, and nothing else turned black. (Two captures
    # of one page may differ a little in their text's antialiasing: the mask is located by the
    # record, not by where the images differ.)
    store = store_of(log)
    _, _, shown = decode_png((store / f"{plain['image']['sha256']}.png").read_bytes())
    _, _, masked = decode_png((store / f"{secret['image']['sha256']}.png").read_bytes())
    assert plain["image"]["masks"] == [], plain
    (box,) = [tuple(m) for m in secret["image"]["masks"]]
    assert box[2] >= 20 and box[3] >= 5, box  # a field's size, not a speck
    assert dark_share(masked, box) > 0.9, (box, dark_share(masked, box))
    assert dark_share(shown, box) < 0.5, (box, dark_share(shown, box))
    outside = [(x, y) for y, row in enumerate(masked) for x, p in enumerate(row)
               if p == (0, 0, 0) and shown[y][x] != (0, 0, 0) and not inside(box, x, y)]
    assert len(outside) < 0.05 * box[2] * box[3], f"{len(outside)} pixels turned black outside the mask"

    # Submitted, the result page shows the secret: an image of it is withheld, and says why.
    srv.ok(sid, ["press", "Enter"])
    srv.ok(sid, ["wait", "--url", "**/submit**"], 20)
    waited = evidence_of(log, 5)[-1]["evidence"]
    assert waited["subcommand"] == "wait", waited
    assert "image" not in waited["after"] and "shows a secret" in waited["after"]["image_withheld"], waited
    # Nothing of the secret is in any record or any stored image's bytes.
    assert SECRET not in log.read_text()
    assert verify(srv.cfg.server_bin, log).returncode == 0


def test_a_read_right_after_a_navigating_key_names_the_new_page_without_waiting_for_the_look(
    start_server, web: harness.WebServer
) -> None:
    """The default level (digests). Enter submits a form to a page that answers after 1 s, so the
    press's look waits that long for the commit. `get url` is let in at once (its intent is in the
    chain before the press's evidence record) and still names the new page: the gate held its read
    until the navigation committed (agent-browser alone names the old page about half the time). Its
    `press` itself sometimes waits for the navigation (then nothing is in flight to race): the flow
    is tried until two presses returned first."""
    srv = start_server()
    log = srv.cfg.audit_log
    raced = 0
    tries = 16
    for attempt in range(tries):
        sid = f"ev-read-{attempt}"
        srv.ok(sid, ["open", web.url("/slow-form")])
        srv.ok(sid, ["fill", "#q", "x"])
        srv.ok(sid, ["press", "Enter"])
        got = srv.ok(sid, ["get", "url"])
        assert got["url"] == web.url("/slow?q=x"), got
        trail = [r for r in evidence_of(log, 3 * (attempt + 1)) if r["session_id"] == sid]
        pressed = trail[-1]
        assert pressed["evidence"]["subcommand"] == "press", trail
        # The record carries a marker for what was typed, not the text.
        assert pressed["evidence"]["after"]["url"].startswith(web.url("/slow?q=[typed:")), pressed
        chain = records(log)
        of_press = {r["phase"]: (i, r) for i, r in enumerate(chain) if r.get("call_id") == pressed["call_id"]}
        took = seconds(of_press["outcome"][1]["time"]) - seconds(of_press["intent"][1]["time"])
        if took > 0.5:
            continue  # this press waited for the navigation itself
        read = next(i for i, r in enumerate(chain)
                    if r.get("session_id") == sid and r.get("phase") == "intent" and r.get("argv") == ["get", "url"])
        assert read < of_press["evidence"][0], "the read waited for the press's look"
        raced += 1
        if raced == 2:
            return
    pytest.fail(f"{tries - raced} of {tries} presses waited for their navigation: {raced} reads met one in flight")


def seconds(stamp: str) -> float:
    """A record's RFC 3339 time (nanoseconds, Z) as seconds of the day."""
    clock = stamp.split("T")[1].rstrip("Z")
    hours, minutes, secs = clock.split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(secs)
