"""Where the driver finds this machine's Ray token: Ray's own order, and one line for a file that cannot be read.
Joining a real cluster that asks for the token is in test_driver_process.py."""

import pytest

from orchestrator.inputs.validation import InputError
from orchestrator.sweep.cluster.auth import find_token, is_loopback, token_locations


def home_with_token(tmp_path, token="from-home\n"):
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text(token)
    return tmp_path


def test_the_variable_comes_first_then_the_named_file_then_the_homes(tmp_path):
    home = home_with_token(tmp_path)
    named = tmp_path / "named"
    named.write_text("  from-path\n")
    both = {"RAY_AUTH_TOKEN": "from-variable", "RAY_AUTH_TOKEN_PATH": str(named)}
    assert find_token(both, home).token == "from-variable"
    empty_variable = {"RAY_AUTH_TOKEN": "", "RAY_AUTH_TOKEN_PATH": str(named)}
    assert find_token(empty_variable, home) == find_token({"RAY_AUTH_TOKEN_PATH": str(named)}, home)
    assert find_token({"RAY_AUTH_TOKEN_PATH": str(named)}, home).token == "from-path"
    found = find_token({}, home)
    assert (found.token, found.source) == ("from-home", str(home / ".ray" / "auth_token"))


def test_no_token_anywhere_is_none_and_the_message_lists_each_place(tmp_path):
    assert find_token({}, tmp_path) is None
    assert find_token({}, home_with_token(tmp_path, "\n")) is None  # an empty file holds no token
    assert token_locations({}, tmp_path) == f"RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH (unset), {tmp_path}/.ray/auth_token"


def test_a_named_file_that_cannot_be_read_or_is_empty_is_one_line_naming_it(tmp_path):
    home = home_with_token(tmp_path)  # Ray aborts rather than fall back to it, and so does the driver
    with pytest.raises(InputError, match=r"^RAY_AUTH_TOKEN_PATH /nonexistent/token: cannot read it \(No such file"):
        find_token({"RAY_AUTH_TOKEN_PATH": "/nonexistent/token"}, home)
    empty = tmp_path / "empty"
    empty.write_text("")
    with pytest.raises(InputError, match="the file is empty"):
        find_token({"RAY_AUTH_TOKEN_PATH": str(empty)}, home)


@pytest.mark.parametrize("host, loopback", [("127.0.0.1", True), ("localhost", True), ("[::1]", True),
                                            ("127.0.1.1", True), ("0.0.0.0", False), ("10.0.0.5", False),
                                            ("head.example.org", False)])  # fmt: skip
def test_loopback_hosts(host, loopback):
    assert is_loopback(host) is loopback
