"""A compromised child of one session cannot drive or read another session by any route it has:
the browser gate, the other daemon's unix socket, /proc of the other session's processes, files the
other session wrote. Each child here is a stand-in agent-browser (a Python script, confined exactly
as agent-browser is): a victim that leaves a daemon running, and a thief given every path and pid
of the victim's it could want (the worst case: an attacker who knows everything)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import time
from pathlib import Path

import pytest

from server import describe

pytestmark = pytest.mark.chromium

# The stand-in. As the victim it starts a daemon that listens on its socket, writes a note in the
# shared dir and keeps running; as the thief it tries each route to the victim and reports what the
# kernel and the gate answered. Controls: the victim's own CLI reaches its own daemon by the same
# routes, and the thief's own gate path is accepted, so a refusal below is the separation.
STAND_IN = r'''#!/usr/bin/python3
import json, os, socket, sys, time

args = sys.argv[1:]
if args == ["--version"]:
    print("agent-browser 0.0.0-stand-in")
    sys.exit(0)
session = args[args.index("--session") + 1]
gate = args[args.index("--cdp") + 1]  # ws://127.0.0.1:PORT/devtools/browser/NAME
port = int(gate.split(":")[2].split("/")[0])
sock_dir = os.environ["AGENT_BROWSER_SOCKET_DIR"]


def handshake(name):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall((f"GET /devtools/browser/{name} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
               "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
               "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n").encode())
    line = s.recv(200).split(b"\r\n")[0].decode(errors="replace")
    s.close()
    return line.split(" ")[1] if " " in line else line


def attempt(fn):
    try:
        return fn()
    except OSError as e:
        return {1: "EPERM", 2: "ENOENT", 13: "EACCES", 111: "ECONNREFUSED"}.get(e.errno, str(e))


def connect_unix(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(3)
    s.connect(path)
    got = s.recv(64).decode()
    s.close()
    return got


def read(path):
    with open(path, "rb") as f:
        return "read " + str(len(f.read()))


def daemon(path, note):
    os.setsid()
    if os.fork():
        os._exit(0)
    # As agent-browser's daemon does: the CLI's pipes are not held open.
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(4)
    with open(note, "w") as f:
        f.write("the victim's private note")
    listener.settimeout(1)
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            conn, _ = listener.accept()
            conn.sendall(b"victim-daemon")
            conn.close()
        except socket.timeout:
            pass
    os._exit(0)


batch = json.load(sys.stdin)
report = {}
for command in batch:
    if command[:2] == ["fill", "#victim"]:
        shared = command[2]
        path = os.path.join(sock_dir, session + ".sock")
        note = os.path.join(shared, "victim-note")
        pid = os.fork()
        if pid == 0:
            daemon(path, note)
        os.waitpid(pid, 0)
        for _ in range(100):
            if os.path.exists(path) and os.path.exists(note):
                break
            time.sleep(0.05)
        report["own_socket"] = attempt(lambda: connect_unix(path))
        report["own_gate"] = attempt(lambda: handshake(session))
    elif command[:2] == ["fill", "#thief"]:
        target = json.loads(command[2])
        report["own_gate"] = attempt(lambda: handshake(session))
        report["gate_as_victim"] = attempt(lambda: handshake(target["daemon"]))
        report["victim_socket"] = attempt(lambda: connect_unix(target["socket"]))
        for part in ("environ", "maps", "mem"):
            report["victim_proc_" + part] = attempt(lambda: read(f"/proc/{target['pid']}/{part}"))
        report["victim_proc_fd"] = attempt(lambda: str(len(os.listdir(f"/proc/{target['pid']}/fd"))))
        report["victim_proc_cwd"] = attempt(lambda: os.readlink(f"/proc/{target['pid']}/cwd"))
        report["victim_note"] = attempt(lambda: read(target["note"]))
# One entry per batch command, as agent-browser prints them; browser-shell's trailing `get url`
# (its navigation guard) gets a page that is always allowed.
entries = [{"command": batch[0], "success": True, "error": None, "result": {"probes": report}}]
for command in batch[1:]:
    result = {"url": "about:blank"} if command == ["get", "url"] else {}
    entries.append({"command": command, "success": True, "error": None, "result": result})
print(json.dumps(entries))
'''


def stand_in(scratch) -> Path:
    bin_dir = scratch("bs-standin", under="/var/tmp")
    bin_dir.chmod(0o755)
    script = bin_dir / "agent-browser"
    script.write_text(STAND_IN)
    script.chmod(0o755)
    return script


def probes(srv, session: str, selector: str, text: str) -> dict:
    is_error, reply = srv.call(session, ["fill", selector, text])
    assert not is_error, describe(reply)
    return json.loads(reply["stdout"])["probes"]


def daemon_pid(sock: Path) -> int:
    """The pid listening on the victim's socket, as the kernel says (never a file the child wrote)."""
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        # Num RefCount Protocol Flags Type St Inode Path; Flags 00010000 is a listening socket.
        if len(fields) == 8 and fields[7] == str(sock) and fields[3] == "00010000":
            listening = fields[6]
            break
    else:
        raise AssertionError(f"nothing listens on {sock}")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == f"socket:[{listening}]":
                    return int(pid)
            except OSError:
                continue
    raise AssertionError(f"no process holds the socket {sock}")


def test_a_child_of_one_session_reaches_no_other_session_by_gate_socket_proc_or_files(
    start_server, scratch
) -> None:
    shared = scratch("bs-shared")  # under /tmp, which every child may write
    shared.chmod(0o1777)
    srv = start_server(agent_browser=stand_in(scratch), extra_read_exec=["/usr"])
    victim = probes(srv, "victim", "#victim", str(shared))
    # Controls: the victim's own CLI reaches its own daemon and the gate accepts its own path.
    assert victim == {"own_socket": "victim-daemon", "own_gate": "101"}, victim
    sock = next(srv.cfg.state_dir.glob("sock/**/victim.sock"))
    target = {
        "daemon": "victim",
        "socket": str(sock),
        "pid": daemon_pid(sock),
        "note": str(shared / "victim-note"),
    }
    before = len(srv.cfg.audit_log.read_text().splitlines())
    thief = probes(srv, "thief", "#thief", json.dumps(target))
    assert thief.pop("own_gate") == "101", thief  # the gate's check can pass
    assert thief.pop("gate_as_victim") == "403", thief
    reached = {route: got for route, got in thief.items() if got not in ("EACCES", "EPERM")}
    assert not reached, f"the thief reached the victim by: {reached}"
    # The gate's refusal is recorded, naming both sessions.
    deadline = time.monotonic() + 5
    while True:
        records = [json.loads(line) for line in srv.cfg.audit_log.read_text().splitlines()[before:]]
        named = [r for r in records if r.get("rule") == "gate.identity"]
        if named or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert len(named) == 1, records
    assert named[0]["session_id"] == "thief" and "victim" in named[0]["reason"], named[0]
    assert stat.S_IMODE(sock.stat().st_mode) & 0o007 == 0, oct(sock.stat().st_mode)


def test_an_agent_browser_the_childrens_uids_cannot_reach_runs_from_a_copy_in_the_state_dir(
    start_server, scratch, agent_browser_bin: Path, web
) -> None:
    """A checkout under a private home (/root is 0700) is no reason to refuse the start: the
    children run a copy the server keeps in its state dir, and the daemon is that copy."""
    private = scratch("bs-private", under="/var/tmp")
    private.chmod(0o700)
    (private / "bin").mkdir()
    binary = private / "bin" / agent_browser_bin.name
    shutil.copy2(agent_browser_bin, binary)
    srv = start_server(agent_browser=binary)
    srv.ok("reach", ["open", web.url("/form")])
    copy = srv.cfg.state_dir / "bin" / binary.name
    assert copy.read_bytes() == binary.read_bytes()
    pid = daemon_pid(srv.cfg.state_dir / "sock" / "reach.sock")
    assert os.readlink(f"/proc/{pid}/exe") == str(copy)
