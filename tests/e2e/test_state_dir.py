"""The state dir belongs to the server: a compromised child can write only inside its home and socket
dirs, so it cannot put a symlink where the server looks for a session's socket and steer the server's
(root's) connects and unlinks at another program's files; a symlink planted inside the socket dir is
never followed. A stand-in agent-browser (a confined /bin/sh script) plays the child."""

from __future__ import annotations

import socket
import stat
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.chromium

ANSWER = '[{"command":["get","url"],"success":true,"result":{"url":"about:blank"},"error":null}]'


def stand_in(script: str) -> Path:
    """The child's script, where it cannot write it (browser-shell refuses one it could replace)."""
    path = Path(tempfile.mkdtemp(prefix="bs-standin-bin-", dir="/var/tmp")) / "agent-browser"
    path.parent.chmod(0o755)  # the children run as uids of their own (--child-uids)
    path.write_text(script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def other_service() -> tuple[Path, socket.socket]:
    """Another program's live socket, somewhere the child cannot reach."""
    directory = Path(tempfile.mkdtemp(prefix="bs-other-", dir="/var/tmp"))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(directory / "victim.sock"))
    listener.listen()
    return directory, listener


def test_a_socket_dir_swapped_for_a_symlink_steers_nothing_and_the_next_start_repairs_it(
    start_server,
) -> None:
    other, listener = other_service()
    listener.settimeout(0.1)
    log = Path(tempfile.mkdtemp(prefix="bs-standin-", dir="/tmp")) / "log"
    script = stand_in(
        "#!/bin/sh\n"
        'state=$(dirname "$AGENT_BROWSER_SOCKET_DIR")\n'
        f'if [ ! -L "$AGENT_BROWSER_SOCKET_DIR" ] && mv "$AGENT_BROWSER_SOCKET_DIR" "$state/sock.moved" 2>>{log} '
        f'&& ln -s {other} "$AGENT_BROWSER_SOCKET_DIR" 2>>{log}; then echo swapped >>{log}; else echo kept >>{log}; fi\n'
        f"echo '{ANSWER}'\n"
    )
    srv = start_server(agent_browser=script, extra_read_exec=["/usr"])
    state = srv.cfg.state_dir
    try:
        for _ in range(3):  # later calls look at the session's socket before they run
            srv.call("victim", ["get", "url"])
        with pytest.raises(TimeoutError):
            listener.accept()
        assert (other / "victim.sock").exists(), "another program's socket was removed"
        srv.stop()
        # Where the state dir is the child's to write (under /tmp here) the swap may succeed; a new
        # server on the same state dir removes the link and starts.
        again = start_server(agent_browser=script, extra_read_exec=["/usr"], base=srv.cfg.base)
        again.call("victim", ["get", "url"])
        assert (other / "victim.sock").exists()
        assert again.cfg.state_dir == state
    finally:
        listener.close()


def test_a_symlink_planted_in_the_socket_dir_is_never_followed(start_server) -> None:
    other, listener = other_service()
    accepted: list[int] = []
    listener.settimeout(0.1)
    script = stand_in(
        "#!/bin/sh\n"
        f'ln -sf {other}/victim.sock "$AGENT_BROWSER_SOCKET_DIR/victim.sock"\n'
        f"echo '{ANSWER}'\n"
    )
    srv = start_server(agent_browser=script, extra_read_exec=["/usr"])
    try:
        for _ in range(2):
            srv.call("victim", ["get", "url"])
            try:
                conn, _ = listener.accept()
                accepted.append(1)
                conn.close()
            except TimeoutError:
                pass
        assert (other / "victim.sock").exists(), "another program's socket was removed"
        assert not accepted, "the server connected to another program's socket through the link"
    finally:
        listener.close()
