"""Building blocks for the tests against the local stack (deploy/local/up): run it, talk to it.

Everything here talks to 127.0.0.1 only. Raw HTTP goes through a plain socket, so nothing
normalises the request line (`//mcp`, `/%6dcp`, `/mcp/../v1` arrive as written). The VNC client
is a minimal RFB 3.8 client (security type None, raw encoding, 32-bit true colour), over TCP to
x11vnc or over a WebSocket through nginx's `/websockify`, the way noVNC connects. The SKILL.md
examples are read and their documented replies compared by the helpers at the end.
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import socket
import struct
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import harness

REPO = harness.REPO_ROOT
UP = REPO / "deploy" / "local" / "up"
DOWN = REPO / "deploy" / "local" / "down"
PORT_VARS = (
    "PUBLIC_PORT",
    "AUTH_BACKEND_PORT",
    "AUTH_SERVICE_PORT",
    "MCP_HUB_PORT",
    "WEBSOCKET_PROXY_PORT",
    "VNC_PORT",
    "CDP_PORT",
)


# --------------------------------------------------------------------------- the stack


@dataclass
class Stack:
    run_dir: Path
    ports: dict[str, int]
    env_file: dict[str, str]
    up_log: Path
    down_log: Path
    # The environment `up` ran with (for `up --allow` on the running stack).
    env: dict[str, str] = field(default_factory=dict)

    @property
    def public(self) -> int:
        return self.ports["PUBLIC_PORT"]

    @property
    def mcp_url(self) -> str:
        return f"http://127.0.0.1:{self.public}/mcp"

    @property
    def api_key(self) -> str:
        return (self.run_dir / "api-key").read_text().strip()

    def pids(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for line in (self.run_dir / "pids").read_text().splitlines():
            name, pid = line.split()[:2]  # then its start time
            out[name] = int(pid)
        return out

    def log(self, name: str) -> Path:
        return self.run_dir / "logs" / f"{name}.log"


def free_ports(n: int) -> list[int]:
    """n distinct free loopback ports (held open together while choosing)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def stack_env(run_dir: Path, ports: dict[str, int], policy: Path, server_bin: Path) -> dict[str, str]:
    env = dict(os.environ)
    for key in list(env):
        if key in PORT_VARS or key.startswith("STACK_") or key in ("DISPLAY", "BROWSER_SHELL_SECRETS_FILE", "GATEWAY_ALLOWED_HOSTS"):
            del env[key]
    env.pop("BROWSER_SHELL_LOCAL_DEV", None)
    env.update({k: str(v) for k, v in ports.items()})
    env.update(
        {
            "STACK_RUN_DIR": str(run_dir),
            "BROWSER_SHELL_POLICY_FILE": str(policy),
            "BROWSER_SHELL_BIN": str(server_bin),
        }
    )
    return env


@contextmanager
def running_stack(
    server_bin: Path,
    policy_json: dict,
    timeout: float = 420,
    secrets_json: dict | None = None,
    extra_env: dict[str, str] | None = None,
) -> Iterator[Stack]:
    """`deploy/local/up` on free ports and a free display, in a fresh run dir; `down` afterwards,
    also when up or the test failed. The run dir is under /var/tmp: browser-shell refuses an
    audit log under /tmp, which the confined agent-browser may write."""
    run_dir = Path(tempfile.mkdtemp(prefix="bsstack", dir="/var/tmp"))
    policy = run_dir.parent / f"{run_dir.name}.policy.json"
    policy.write_text(json.dumps(policy_json))
    ports = dict(zip(PORT_VARS, free_ports(len(PORT_VARS)), strict=True))
    env = stack_env(run_dir, ports, policy, server_bin)
    env.update(extra_env or {})
    secrets = run_dir.parent / f"{run_dir.name}.secrets.json"
    if secrets_json is not None:
        fd = os.open(secrets, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(secrets_json, fh)
        env["BROWSER_SHELL_SECRETS_FILE"] = str(secrets)
    up_log = run_dir.parent / f"{run_dir.name}.up.log"
    down_log = run_dir.parent / f"{run_dir.name}.down.log"
    stack = Stack(run_dir=run_dir, ports=ports, env_file={}, up_log=up_log, down_log=down_log, env=env)
    try:
        with open(up_log, "wb") as log:
            r = subprocess.run([str(UP)], env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"deploy/local/up exited {r.returncode}:\n{harness.tail(up_log, 8000)}")
        stack.env_file = dict(
            line.split("=", 1) for line in (run_dir / "stack.env").read_text().splitlines() if "=" in line
        )
        yield stack
    finally:
        with open(down_log, "wb") as log:
            subprocess.run([str(DOWN)], env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, timeout=120)
        if not os.environ.get("BROWSER_SHELL_E2E_KEEP"):
            # The state and output dirs are down's to remove (test_stack checks that it does).
            subprocess.run(["rm", "-rf", "--", str(run_dir), str(policy), str(secrets), up_log, down_log], check=False)


# --------------------------------------------------------------------------- raw HTTP


@dataclass
class Reply:
    status: int | None  # None: the connection was closed without a status line
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


def raw_http(port: int, request_line: str, headers: dict[str, str] | None = None, body: bytes = b"", timeout: float = 10) -> Reply:
    """Send exactly `request_line` (e.g. "GET //mcp HTTP/1.1") to 127.0.0.1:port; read one reply."""
    hdrs = {"Host": f"127.0.0.1:{port}", "Connection": "close"}
    hdrs.update(headers or {})
    if body:
        hdrs["Content-Length"] = str(len(body))
    head = request_line + "\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items()) + "\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(head.encode("latin-1") + body)
        data = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        except ConnectionResetError:
            pass
    if not data:
        return Reply(status=None)
    header_blob, _, rest = data.partition(b"\r\n\r\n")
    lines = header_blob.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    parsed = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        parsed[k.strip().lower()] = v.strip()
    if parsed.get("transfer-encoding", "").lower() == "chunked":
        rest = _dechunk(rest)
    return Reply(status=status, headers=parsed, body=rest)


def _dechunk(data: bytes) -> bytes:
    out = b""
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out += data[:size]
        data = data[size + 2 :]
    return out


# --------------------------------------------------------------------------- WebSocket (client side)


class WebSocket:
    """A minimal RFC 6455 client for binary frames (what noVNC does over /websockify)."""

    def __init__(self, sock: socket.socket, leftover: bytes) -> None:
        self.sock = sock
        self.buf = b""
        self.pending = leftover  # raw frame bytes already read with the handshake

    @classmethod
    def connect(cls, port: int, path: str, headers: dict[str, str] | None = None, timeout: float = 10) -> tuple[int, "WebSocket | None"]:
        """Returns (HTTP status of the handshake, socket if it was upgraded (101))."""
        key = base64.b64encode(secrets.token_bytes(16)).decode()
        hdrs = {
            "Host": f"127.0.0.1:{port}",
            "Upgrade": "websocket",
            "Connection": "Upgrade",
            "Sec-WebSocket-Key": key,
            "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Protocol": "binary",
        }
        hdrs.update(headers or {})
        sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        sock.sendall((f"GET {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items()) + "\r\n").encode())
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                sock.close()
                return (0 if not data else int(data.split()[1])), None
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        status = int(head.split()[1])
        if status != 101:
            sock.close()
            return status, None
        return status, cls(sock, rest)

    def _read_exact(self, n: int) -> bytes:
        while len(self.pending) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("websocket closed")
            self.pending += chunk
        out, self.pending = self.pending[:n], self.pending[n:]
        return out

    def _read_frame(self) -> tuple[int, bytes]:
        b0, b1 = self._read_exact(2)
        opcode = b0 & 0x0F
        length = b1 & 0x7F
        if length == 126:
            (length,) = struct.unpack(">H", self._read_exact(2))
        elif length == 127:
            (length,) = struct.unpack(">Q", self._read_exact(8))
        mask = self._read_exact(4) if b1 & 0x80 else b""
        payload = self._read_exact(length)
        if mask:
            payload = bytes(c ^ mask[i % 4] for i, c in enumerate(payload))
        return opcode, payload

    def recv(self, n: int) -> bytes:
        """n bytes of the binary stream carried by the frames."""
        while len(self.buf) < n:
            opcode, payload = self._read_frame()
            if opcode == 0x8:
                raise ConnectionError("websocket closed by the server")
            if opcode in (0x0, 0x2):
                self.buf += payload
            elif opcode == 0x9:  # ping -> pong
                self._send_frame(0xA, payload)
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _send_frame(self, opcode: int, payload: bytes) -> None:
        mask = secrets.token_bytes(4)
        n = len(payload)
        if n < 126:
            head = struct.pack(">BB", 0x80 | opcode, 0x80 | n)
        elif n < 65536:
            head = struct.pack(">BBH", 0x80 | opcode, 0x80 | 126, n)
        else:
            head = struct.pack(">BBQ", 0x80 | opcode, 0x80 | 127, n)
        self.sock.sendall(head + mask + bytes(c ^ mask[i % 4] for i, c in enumerate(payload)))

    def sendall(self, data: bytes) -> None:
        self._send_frame(0x2, data)

    def close(self) -> None:
        try:
            self._send_frame(0x8, b"")
        except OSError:
            pass
        self.sock.close()


class TcpStream:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def recv(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("connection closed")
            out += chunk
        return out

    def sendall(self, data: bytes) -> None:
        self.sock.sendall(data)

    def close(self) -> None:
        self.sock.close()


# --------------------------------------------------------------------------- RFB (VNC)


def vnc_response(password: str, challenge: bytes) -> bytes:
    """VNC authentication: the challenge DES-encrypted under the password (8 bytes, each bit-reversed)."""
    from cryptography.hazmat.decrepit.ciphers.algorithms import TripleDES
    from cryptography.hazmat.primitives.ciphers import Cipher, modes

    key = bytes(int(f"{b:08b}"[::-1], 2) for b in password.encode()[:8].ljust(8, b"\0"))
    encryptor = Cipher(TripleDES(key * 3), modes.ECB()).encryptor()  # one key thrice: single DES
    return encryptor.update(challenge) + encryptor.finalize()


class RfbRefused(AssertionError):
    """The VNC server refused the password."""


class Rfb:
    """RFB 3.8, VNC authentication with `password`, raw encoding, pixels as 32-bit little-endian RGB
    (r<<16|g<<8|b). The stack's x11vnc takes a view-only password and a control one (input)."""

    def __init__(self, stream: WebSocket | TcpStream, password: str) -> None:
        self.s = stream
        version = self.s.recv(12)
        assert version.startswith(b"RFB 003."), version
        self.s.sendall(b"RFB 003.008\n")
        (count,) = self.s.recv(1)
        assert count > 0, f"server refused the connection: {self.s.recv(4)!r}"
        types = self.s.recv(count)
        assert 2 in types, f"VNC authentication not offered: {list(types)}"
        self.s.sendall(bytes([2]))
        self.s.sendall(vnc_response(password, self.s.recv(16)))
        (result,) = struct.unpack(">I", self.s.recv(4))
        if result != 0:
            raise RfbRefused("the VNC password was refused")
        self.s.sendall(bytes([1]))  # ClientInit: shared
        self.width, self.height = struct.unpack(">HH", self.s.recv(4))
        self.s.recv(16)  # server pixel format (replaced below)
        (name_len,) = struct.unpack(">I", self.s.recv(4))
        self.name = self.s.recv(name_len).decode("latin-1")
        # SetPixelFormat: 32 bpp, depth 24, little-endian, true colour, max 255, shifts r16 g8 b0.
        self.s.sendall(struct.pack(">B3xBBBBHHHBBB3x", 0, 32, 24, 0, 1, 255, 255, 255, 16, 8, 0))
        self.s.sendall(struct.pack(">BxHi", 2, 1, 0))  # SetEncodings: raw only

    def grab(self, x: int, y: int, w: int, h: int) -> list[tuple[int, int, int]]:
        """One full (non-incremental) update of the rectangle; pixels as (r, g, b), row-major."""
        self.s.sendall(struct.pack(">BBHHHH", 3, 0, x, y, w, h))
        pixels: dict[tuple[int, int], tuple[int, int, int]] = {}
        while True:
            (msg,) = self.s.recv(1)
            if msg == 0:  # FramebufferUpdate
                self.s.recv(1)
                (nrects,) = struct.unpack(">H", self.s.recv(2))
                for _ in range(nrects):
                    rx, ry, rw, rh, enc = struct.unpack(">HHHHi", self.s.recv(12))
                    if enc == -223:  # DesktopSize pseudo-encoding: no pixel data
                        continue
                    assert enc == 0, f"unexpected encoding {enc}"
                    data = self.s.recv(rw * rh * 4)
                    for j in range(rh):
                        row = data[j * rw * 4 : (j + 1) * rw * 4]
                        for i in range(rw):
                            b, g, r = row[i * 4], row[i * 4 + 1], row[i * 4 + 2]
                            pixels[(rx + i, ry + j)] = (r, g, b)
                return [pixels[(px, py)] for py in range(y, y + h) for px in range(x, x + w) if (px, py) in pixels]
            if msg == 1:  # SetColourMapEntries
                self.s.recv(1)
                _, n = struct.unpack(">HH", self.s.recv(4))
                self.s.recv(6 * n)
            elif msg == 2:  # Bell
                continue
            elif msg == 3:  # ServerCutText
                self.s.recv(3)
                (n,) = struct.unpack(">I", self.s.recv(4))
                self.s.recv(n)
            else:
                raise AssertionError(f"unexpected RFB server message {msg}")

    def click(self, x: int, y: int) -> None:
        """Move the pointer to (x, y), press and release the left button (PointerEvent), then ask
        for an update. The update shows x11vnc read the events, not that they reached the display:
        a client that disconnects at once can still lose them, so wait for the click's effect."""
        for mask in (0, 1, 0):
            self.s.sendall(struct.pack(">BBHH", 5, mask, x, y))
        self.grab(x, y, 1, 1)

    def close(self) -> None:
        self.s.close()


def vnc_password(stack: Any, control: bool) -> str:
    """The stack's VNC password: the control one (may send input) or the view-only one."""
    name = "vnc-password" if control else "vnc-view-password"
    return (stack.run_dir / name).read_text().strip()


def share_of(pixels: list[tuple[int, int, int]], rgb: tuple[int, int, int], tolerance: int = 8) -> float:
    if not pixels:
        return 0.0
    hits = sum(all(abs(a - b) <= tolerance for a, b in zip(p, rgb, strict=True)) for p in pixels)
    return hits / len(pixels)


# --------------------------------------------------------------------------- SKILL.md examples


def skill_examples(text: str) -> list[tuple[dict, dict | None]]:
    """(call, documented reply or None) for every line of every ```json block in SKILL.md.

    A line with `argv` is a call; a line with `exit_code` is the reply to the call right before
    it. Anything else in a json block is an error: the doc must stay executable."""
    pairs: list[list] = []
    blocks = re.findall(r"^```json\n(.*?)^```", text, re.S | re.M)
    assert blocks, "no json blocks in SKILL.md"
    for block in blocks:
        for line in block.splitlines():
            if not line.strip():
                continue
            obj = json.loads(line)
            if "argv" in obj and "session_id" in obj:
                pairs.append([obj, None])
            elif "exit_code" in obj and "session_id" in obj:
                assert pairs and pairs[-1][1] is None, f"a reply without its call: {line}"
                assert pairs[-1][0]["session_id"] == obj["session_id"], f"reply to another session: {line}"
                pairs[-1][1] = obj
            else:
                raise AssertionError(f"a json line that is neither a call nor a reply: {line}")
    return [(c, r) for c, r in pairs]


def doc_matches(expected: Any, actual: Any) -> bool:
    """Documented value vs actual: `…` in a string stands for any text; objects may have more keys."""
    if isinstance(expected, str):
        if not isinstance(actual, str):
            return False
        if "…" in expected:
            return re.fullmatch(".*".join(map(re.escape, expected.split("…"))), actual, re.S) is not None
        return expected == actual
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(k in actual and doc_matches(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, list):
        return isinstance(actual, list) and len(expected) == len(actual) and all(map(doc_matches, expected, actual))
    return type(expected) is type(actual) and expected == actual


def reply_matches(doc: dict, actual: dict) -> bool:
    for key, value in doc.items():
        if key not in actual:
            return False
        if key == "stdout" and value.strip():
            try:
                expected = json.loads(value)
            except ValueError:
                expected = None
            if expected is not None:
                try:
                    got = json.loads(actual["stdout"])
                except ValueError:
                    return False
                if not (doc_matches(expected, got) and actual["stdout"].endswith("\n") == value.endswith("\n")):
                    return False
                continue
        if not doc_matches(value, actual[key]):
            return False
    return True
