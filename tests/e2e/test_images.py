"""What the agent sees and what the reviewer sees: a screenshot reaches the client as an MCP image
(after the JSON text, which stays the dict), within the operator's size bound (shrunk or left out,
and the reply says so), and the outcome record carries the digests of what the agent was shown and
the page URL the command ended on."""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import zlib
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from server import BlockingServer, ServerConfig, check_envelope, describe

pytestmark = pytest.mark.chromium

MIB = 1024 * 1024


# --------------------------------------------------------------------------- helpers


def png_size(png: bytes) -> tuple[int, int]:
    """Decode a PNG for real: magic, every chunk's CRC, IHDR, and the inflated image data must be
    exactly one filter byte plus one row of 8-bit samples per line. Returns (width, height)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n", f"no PNG magic: {png[:16]!r}"
    pos, chunks, idat = 8, [], b""
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        kind, data = png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", png[pos + 8 + length : pos + 12 + length])
        assert zlib.crc32(kind + data) == crc, f"bad CRC in {kind!r}"
        chunks.append(kind)
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", data)
        elif kind == b"IDAT":
            idat += data
        pos += 12 + length
    assert chunks[0] == b"IHDR" and chunks[-1] == b"IEND", chunks
    assert depth == 8 and interlace == 0, (depth, interlace)
    channels = {0: 1, 2: 3, 4: 2, 6: 4}[color]
    assert len(zlib.decompress(idat)) == height * (1 + width * channels)
    return width, height


def screenshot(srv: BlockingServer, sid: str, argv: list[str]) -> tuple[dict[str, Any], list[Any]]:
    """A screenshot call; returns (structuredContent, the content items after the first)."""

    async def go(session):
        with anyio.fail_after(120):
            return await session.call_tool("browser-shell", {"session_id": sid, "argv": argv})

    result = srv.run(go)
    is_error, reply = check_envelope(result, sid)
    assert not is_error and reply["exit_code"] == 0, describe(reply)
    return reply, list(result.content[1:])


def the_image(items: list[Any]) -> bytes:
    assert len(items) == 1 and items[0].type == "image", items
    assert items[0].mime_type == "image/png", items[0].mime_type
    return base64.b64decode(items[0].data, validate=True)


def page_metrics(srv: BlockingServer, sid: str) -> dict[str, float]:
    return json.loads(srv.ok(sid, ["get", "title"])["title"])


def outcome_of(log: Path, subcommand: str) -> dict[str, Any]:
    """The outcome record of the last call of `subcommand`."""
    records = [json.loads(line) for line in log.read_text().splitlines()]
    calls = {r["call_id"] for r in records if r["phase"] == "intent" and r["argv"][0] == subcommand}
    outcomes = [r for r in records if r["phase"] == "outcome" and r["call_id"] in calls]
    assert outcomes, f"no outcome record of {subcommand}"
    return outcomes[-1]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------- within the bound


def test_a_screenshot_arrives_as_the_png_the_outcome_record_names(server, web) -> None:
    url = web.url("/measure?w=300&h=200&token=s3cret")
    opened = server.ok("img1", ["open", url])
    metrics = page_metrics(server, "img1")
    reply, items = screenshot(server, "img1", ["screenshot", "view.png"])
    png = the_image(items)
    # The page as it was shown: its viewport in device pixels.
    assert png_size(png) == (round(metrics["iw"] * metrics["dpr"]), round(metrics["ih"] * metrics["dpr"])), metrics
    # The file stays on disk, and the image is that file, byte for byte.
    path = Path(json.loads(reply["stdout"])["path"])
    assert path.read_bytes() == png
    assert "[browser-shell" not in reply["stderr"], reply["stderr"]

    record = outcome_of(server.cfg.audit_log, "screenshot")
    assert record["image_action"] == "attached"
    assert record["image_bytes"] == len(png) and record["image_sha256"] == sha256(png), record
    assert record["reply_stdout_bytes"] == len(reply["stdout"].encode())
    assert record["reply_stdout_sha256"] == sha256(reply["stdout"].encode())
    # Where the page was when the command ended, redacted like every URL in the log.
    assert record["page_url"] == url.replace("token=s3cret", "token=***"), record["page_url"]
    assert "s3cret" not in server.cfg.audit_log.read_text()
    assert opened["url"] == url


def test_a_full_page_screenshot_has_the_pages_scrollable_size(server, web) -> None:
    server.ok("img2", ["open", web.url("/measure?w=500&h=2400")])
    metrics = page_metrics(server, "img2")
    assert metrics["sh"] > metrics["ih"], metrics
    _, items = screenshot(server, "img2", ["screenshot", "--full", "full.png"])
    width, height = png_size(the_image(items))
    assert (width, height) == (round(metrics["sw"] * metrics["dpr"]), round(metrics["sh"] * metrics["dpr"])), metrics


def test_other_calls_carry_no_image_and_record_their_digests(server, web) -> None:
    url = web.url("/next")
    server.ok("img3", ["open", url])

    async def go(session):
        return await session.call_tool("browser-shell", {"session_id": "img3", "argv": ["get", "url"]})

    result = server.run(go)
    _, reply = check_envelope(result, "img3")
    assert [item.type for item in result.content] == ["text"], result.content
    record = outcome_of(server.cfg.audit_log, "get")
    assert "image_action" not in record and "image_sha256" not in record, record
    assert record["reply_stdout_sha256"] == sha256(reply["stdout"].encode())
    assert record["page_url"] == url


def test_a_failed_screenshot_carries_no_image(server, web) -> None:
    server.ok("img4", ["open", web.url("/next")])
    is_error, reply = server.call("img4", ["screenshot", "#no-such-element", "x.png"])
    assert is_error and reply["exit_code"] == 1, describe(reply)
    record = outcome_of(server.cfg.audit_log, "screenshot")
    assert record["outcome"] == "error" and "image_action" not in record, record


# --------------------------------------------------------------------------- over the bound


def test_a_large_page_over_the_bound_arrives_shrunk_and_says_so(start_server, web) -> None:
    bound = 256 * 1024  # base64 bytes: PNGs of up to 192 KiB
    srv = start_server(extra_args=["--max-image-bytes", str(bound)])
    srv.ok("big1", ["open", web.url("/noise?w=1200&h=1600&seed=7")])
    metrics = page_metrics(srv, "big1")
    reply, items = screenshot(srv, "big1", ["screenshot", "--full", "big.png"])
    png = the_image(items)
    assert len(items[0].data) <= bound
    on_disk = Path(json.loads(reply["stdout"])["path"]).stat().st_size
    assert on_disk > bound, f"the page made a PNG of only {on_disk} bytes: no bound was exercised"
    note = reply["stderr"]
    assert f"the screenshot ({on_disk} bytes) is over this server's image bound ({bound} bytes" in note, note
    factor = int(note.split("shrunk 1/")[1].split(" ")[0])
    print(f"\n[e2e] {on_disk}-byte PNG on disk, {len(png)} attached: {note}")
    full = (round(metrics["sw"] * metrics["dpr"]), round(metrics["sh"] * metrics["dpr"]))
    assert png_size(png) == (-(-full[0] // factor), -(-full[1] // factor)), (full, factor)
    record = outcome_of(srv.cfg.audit_log, "screenshot")
    assert record["image_action"] == "downscaled"
    assert record["image_sha256"] == sha256(png) and record["image_bytes"] == len(png), record


@pytest.mark.parametrize(
    ("bound", "why"),
    [(1024, "even shrunk to 1/8"), (0, "images are turned off on this server")],
)
def test_an_image_that_cannot_fit_is_left_out_and_the_reply_says_why(start_server, web, bound, why) -> None:
    srv = start_server(extra_args=["--max-image-bytes", str(bound)])
    srv.ok("big2", ["open", web.url("/noise?w=800&h=600&seed=3")])
    reply, items = screenshot(srv, "big2", ["screenshot", "left.png"])
    assert items == [], items
    assert "[browser-shell: the screenshot is not attached" in reply["stderr"] and why in reply["stderr"], reply["stderr"]
    assert Path(json.loads(reply["stdout"])["path"]).is_file()
    record = outcome_of(srv.cfg.audit_log, "screenshot")
    assert record["image_action"] == "omitted" and "image_sha256" not in record, record


# --------------------------------------------------------------------------- the current revision


def test_a_client_on_the_current_revision_gets_the_image_too(binaries, chromium, web, server_config) -> None:
    """2026-07-28 has no `initialize`: the official client discovers the server and sends its
    identity in each request's `_meta`, which the audit record names."""
    cfg: ServerConfig = server_config(tag="bsm")
    cfg.base.mkdir(parents=True, exist_ok=True)
    cfg.write_policy()

    async def go() -> tuple[str, Any]:
        params = StdioServerParameters(command=str(cfg.server_bin), args=cfg.args(), env=cfg.env())
        with open(cfg.stderr_log, "a") as errlog:
            async with Client(stdio_client(params, errlog=errlog), mode="2026-07-28") as client:
                await client.call_tool("browser-shell", {"session_id": "m1", "argv": ["open", web.url("/measure")]})
                result = await client.call_tool("browser-shell", {"session_id": "m1", "argv": ["screenshot", "m.png"]})
                return client.session.protocol_version, result

    version, result = anyio.run(go)
    assert version == "2026-07-28"
    _, reply = check_envelope(result, "m1")
    png = the_image(list(result.content[1:]))
    png_size(png)
    record = outcome_of(cfg.audit_log, "screenshot")
    assert record["image_sha256"] == sha256(png), record
    assert record["client"].startswith("mcp/"), record
