"""Self-checks of the stack suite's own helpers (stack.py), no stack involved: a checker that
cannot fail proves nothing. Static: pure Python."""

from __future__ import annotations

import pytest

from stack import doc_matches, reply_matches

pytestmark = pytest.mark.static


def test_the_skill_reply_checker_rejects_what_it_must():
    """The checker test_stack.py's SKILL.md test relies on rejects what it must (a test that
    cannot fail proves nothing)."""
    actual = {"session_id": "a", "exit_code": 0, "stdout": '{"url":"http://x/","title":"T"}\n', "stderr": ""}
    assert reply_matches({"session_id": "a", "exit_code": 0, "stdout": '{"url":"http://x/"}\n'}, actual)
    assert reply_matches({"session_id": "a", "stdout": '{"url":"http://…/"}\n'}, actual)
    assert not reply_matches({"session_id": "a", "exit_code": 1}, actual)
    assert not reply_matches({"session_id": "a", "stdout": '{"url":"http://y/"}\n'}, actual)
    assert not reply_matches({"session_id": "a", "stdout": '{"closed":true}\n'}, actual)
    assert not reply_matches({"session_id": "a", "stderr": "refused …"}, actual)
    assert not reply_matches({"session_id": "b"}, actual)
    assert doc_matches("refused [url.scheme]: …", "refused [url.scheme]: the file: scheme is not allowed")
    assert not doc_matches("refused [url.scheme]: …", "refused [address.private]: 127.0.0.2")
    assert not doc_matches(True, 1)
