"""Robustness probes of the LLM layer (issue 55): bad URIs, bad sampling arguments, bad timeout
settings, and real servers on loopback that misbehave: one that accepts and never answers, one that
closes in the middle of its answer, one that does not speak HTTP.

Every server here is a real socket on 127.0.0.1 served by a thread; nothing is mocked. The backends
are HTTP ones: argument checks run before any request, so a check that is missing shows up as a
connection attempt (a different error), not as a pass.
"""
from __future__ import annotations

import math
import socket
import threading

import pytest

from metacog_fast.llm import LLMConnectionError, open_llm
from metacog_fast.llm.http_client import (CONNECT_TIMEOUT_VAR, DEFAULT_CONNECT_TIMEOUT, DEFAULT_READ_TIMEOUT,
                                          READ_TIMEOUT_VAR, LLMTimeoutError, resolve_timeouts)
from metacog_fast.llm.uri import parse_uri


class LoopbackServer:
    """A TCP server thread on 127.0.0.1: ``handle(conn)`` runs for each accepted connection;
    ``connections`` counts them (how many attempts the client made)."""

    def __init__(self, handle) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self.connections = 0
        self._handle = handle
        self._stop = threading.Event()
        self._open: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            self.connections += 1
            self._open.append(conn)
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for c in self._open:
            c.close()
        self.sock.close()


def _read_request(conn: socket.socket) -> bytes:
    """Read one HTTP request (headers and Content-Length body)."""
    conn.settimeout(5)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return data


@pytest.fixture
def hanging_server():
    """Accepts, reads the request, never answers (holds the connection open)."""
    def handle(conn: socket.socket) -> None:
        _read_request(conn)
        # nothing sent: the connection stays open until the server closes

    srv = LoopbackServer(handle)
    yield srv
    srv.close()


@pytest.fixture(autouse=True)
def _no_timeout_env(monkeypatch):
    monkeypatch.delenv(CONNECT_TIMEOUT_VAR, raising=False)
    monkeypatch.delenv(READ_TIMEOUT_VAR, raising=False)


# ------------------------------------------------------------------------------- URIs

@pytest.mark.parametrize("uri, expected", [
    ("foo://x", "unknown scheme 'foo'"),
    ("", "expected '<scheme>://...'"),
    ("model.gguf", "expected '<scheme>://...'"),
    ("http://", "expected http://host:port/v1"),
    ("https:///v1", "expected https://host:port/v1"),
    ("http://127.0.0.1:99999/v1", "bad port"),
    ("http://127.0.0.1:port/v1", "bad port"),
    ("vllm://", "expected vllm://<model>"),
    ("finetuned:", "expected finetuned:<name>"),
])
def test_bad_uri_is_a_value_error_naming_it(uri, expected):
    with pytest.raises(ValueError, match="LLM backend URI") as err:
        parse_uri(uri)
    assert expected in str(err.value) and repr(uri) in str(err.value)
    with pytest.raises(ValueError, match="LLM backend URI"):
        open_llm(uri)


@pytest.mark.parametrize("uri", [None, 3, b"http://x/v1"])
def test_uri_of_another_type_is_a_value_error(uri):
    with pytest.raises(ValueError, match="LLM backend URI"):
        parse_uri(uri)  # type: ignore[arg-type]


def test_unknown_backend_option_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['n_thread'\]"):
        open_llm("http://127.0.0.1:9/v1", n_thread=2)


# ------------------------------------------------------------------------------- sampling arguments

@pytest.fixture
def unreachable():
    """An HTTP backend whose server does not exist: a call that passes its checks fails to connect."""
    llm = open_llm("http://127.0.0.1:9/v1", model="m", max_retries=0, connect_timeout=0.5)
    yield llm
    llm.close()


@pytest.mark.parametrize("kwargs, name", [
    ({"n": 0}, "n"), ({"n": True}, "n"), ({"n": 1.0}, "n"),
    ({"temperature": -0.1}, "temperature"), ({"temperature": math.nan}, "temperature"),
    ({"temperature": math.inf}, "temperature"), ({"temperature": "0"}, "temperature"),
    ({"top_p": 0.0}, "top_p"), ({"top_p": 1.5}, "top_p"), ({"top_p": math.nan}, "top_p"),
    ({"max_tokens": 0}, "max_tokens"), ({"max_tokens": 2.5}, "max_tokens"),
    ({"stop": [""]}, r"stop\[0\]"), ({"stop": 5}, "stop"), ({"stop": ["ok", None]}, r"stop\[1\]"),
    ({"seed": -1}, "seed"), ({"seed": 2**32}, "seed"), ({"seed": 1.5}, "seed"),
])
def test_bad_sampling_argument_names_it(unreachable, kwargs, name):
    with pytest.raises(ValueError, match=rf"^{name}: expected"):
        unreachable.complete("hello", **kwargs)
    assert unreachable.client.attempts == 0  # rejected before any request


@pytest.mark.parametrize("call, exc, name", [
    (lambda m: m.complete(""), ValueError, "prompt"),
    (lambda m: m.complete(7), TypeError, "prompt"),
    (lambda m: m.chat([]), ValueError, "messages"),
    (lambda m: m.chat([{"role": "robot", "content": "hi"}]), ValueError, r"messages\[0\]\.role"),
    (lambda m: m.chat([{"role": "user"}]), ValueError, r"messages\[0\]"),
    (lambda m: m.choose("p", []), ValueError, "options"),
    (lambda m: m.choose("p", ["a", "a"]), ValueError, "options"),
    (lambda m: m.choose("p", ["a", ""]), ValueError, r"options\[1\]"),
    (lambda m: m.complete("p", choices=["x", "x"]), ValueError, "choices"),
    (lambda m: m.choose_many(["p", "q"], [["a"], ["b"], ["c"]]), ValueError, "options"),
])
def test_bad_call_argument_names_it(unreachable, call, exc, name):
    with pytest.raises(exc, match=rf"^{name}"):
        call(unreachable)
    assert unreachable.client.attempts == 0


# ------------------------------------------------------------------------------- timeout settings

def test_default_timeouts_are_a_person_s_patience():
    llm = open_llm("http://127.0.0.1:9/v1", model="m")
    assert (llm.client.connect_timeout, llm.client.read_timeout) == (DEFAULT_CONNECT_TIMEOUT, DEFAULT_READ_TIMEOUT)
    assert DEFAULT_CONNECT_TIMEOUT <= 10 and DEFAULT_READ_TIMEOUT <= 90


def test_timeouts_from_the_environment(monkeypatch):
    monkeypatch.setenv(CONNECT_TIMEOUT_VAR, "2.5")
    monkeypatch.setenv(READ_TIMEOUT_VAR, "30")
    llm = open_llm("http://127.0.0.1:9/v1", model="m")
    assert (llm.client.connect_timeout, llm.client.read_timeout) == (2.5, 30.0)
    # a value given to the backend wins over the environment
    llm = open_llm("http://127.0.0.1:9/v1", model="m", read_timeout=7)
    assert llm.client.read_timeout == 7.0


@pytest.mark.parametrize("text", ["abc", "0", "-3", "inf", "nan"])
def test_bad_timeout_in_the_environment_names_the_variable(monkeypatch, text):
    monkeypatch.setenv(READ_TIMEOUT_VAR, text)
    with pytest.raises(ValueError, match=rf"^\${READ_TIMEOUT_VAR}: expected seconds > 0, got '{text}'"):
        open_llm("http://127.0.0.1:9/v1", model="m")


@pytest.mark.parametrize("name, value", [("connect_timeout", 0), ("read_timeout", -1.0), ("read_timeout", math.inf),
                                         ("connect_timeout", True), ("read_timeout", "5")])
def test_bad_timeout_setting_names_it(name, value):
    with pytest.raises(ValueError, match=rf"^{name}: expected seconds > 0"):
        open_llm("http://127.0.0.1:9/v1", model="m", **{name: value})
    with pytest.raises(ValueError, match=rf"^{name}"):
        resolve_timeouts(**{"connect_timeout": None, "read_timeout": None, name: value})


# ------------------------------------------------------------------------------- misbehaving servers

def test_server_that_never_answers_fails_after_one_read_timeout(hanging_server, monkeypatch):
    monkeypatch.setenv(READ_TIMEOUT_VAR, "0.5")
    llm = open_llm(hanging_server.url, model="m", max_retries=3, backoff_initial=0.01)
    with pytest.raises(LLMTimeoutError) as err:
        llm.complete("hello")
    msg = str(err.value)
    assert hanging_server.url + "/completions" in msg
    assert "read_timeout=0.5 s" in msg and READ_TIMEOUT_VAR in msg
    # not retried: a server that took the request and sat on it would only multiply the wait
    assert llm.client.attempts == 1 and hanging_server.connections == 1
    assert isinstance(err.value, LLMConnectionError)  # callers catching the old error still catch it


def test_server_that_never_answers_discovery_names_models_url(hanging_server):
    llm = open_llm(hanging_server.url, read_timeout=0.3)  # no model: GET /models first
    with pytest.raises(LLMTimeoutError, match="read_timeout=0.3 s") as err:
        llm.complete("hello")
    assert hanging_server.url + "/models" in str(err.value)


def test_server_that_closes_mid_answer_is_retried_then_a_clear_error():
    def handle(conn: socket.socket) -> None:
        _read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n"
                     b'{"choices": [{"text": "hal')
        conn.close()

    srv = LoopbackServer(handle)
    try:
        llm = open_llm(srv.url, model="m", max_retries=2, backoff_initial=0.01, read_timeout=5)
        with pytest.raises(LLMConnectionError) as err:
            llm.complete("hello")
        msg = str(err.value)
        assert not isinstance(err.value, LLMTimeoutError)
        assert srv.url + "/completions" in msg and "3 attempts" in msg and "IncompleteRead" in msg
        assert llm.client.attempts == 3
    finally:
        srv.close()


def test_server_that_does_not_speak_http_is_a_clear_error():
    def handle(conn: socket.socket) -> None:
        _read_request(conn)
        conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
        conn.close()

    srv = LoopbackServer(handle)
    try:
        llm = open_llm(srv.url, model="m", max_retries=1, backoff_initial=0.01, read_timeout=5)
        with pytest.raises(LLMConnectionError, match="BadStatusLine") as err:
            llm.complete("hello")
        assert srv.url in str(err.value) and "2 attempts" in str(err.value)
    finally:
        srv.close()


def test_server_that_closes_without_a_byte_is_retried():
    def handle(conn: socket.socket) -> None:
        _read_request(conn)
        conn.close()

    srv = LoopbackServer(handle)
    try:
        llm = open_llm(srv.url, model="m", max_retries=1, backoff_initial=0.01, read_timeout=5)
        with pytest.raises(LLMConnectionError, match="RemoteDisconnected"):
            llm.complete("hello")
        assert llm.client.attempts == 2
    finally:
        srv.close()
