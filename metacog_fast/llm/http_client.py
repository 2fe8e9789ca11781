"""JSON over HTTP(S) with connect/read timeouts and bounded retries (stdlib only).

Retried: connection errors (refused, reset, a connect timeout, an answer cut off), HTTP 5xx and
429, with exponential backoff. Not retried: other 4xx (the request itself is wrong) and a read
timeout: a server that accepted the request and sent nothing for ``read_timeout`` seconds is stuck or
busy with it, and asking again would only multiply the wait (``LLMTimeoutError`` at once). The API
key is sent as a bearer header and never appears in logs or error messages.

Default timeouts (:data:`DEFAULT_CONNECT_TIMEOUT`, :data:`DEFAULT_READ_TIMEOUT`; settable per
backend in ``HttpConfig`` or for every backend of the process with :data:`CONNECT_TIMEOUT_VAR` /
:data:`READ_TIMEOUT_VAR`): 5 s to connect, ample for a server on this machine or the LAN and a few
round trips to a remote one; 60 s for the first byte of an answer, so that a server that accepted and
never answers is known within a minute (it was ~8 min: 120 s x 4 attempts) while one non-streamed
completion of a few hundred tokens from a mid-size model on a loaded server still fits.
"""
from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit


class LLMConnectionError(ConnectionError):
    """The LLM server could not be reached (after the retries)."""


class LLMTimeoutError(LLMConnectionError):
    """The LLM server accepted the connection but sent no answer within the read timeout (not retried)."""


DEFAULT_CONNECT_TIMEOUT = 5.0
"""Seconds to establish a connection (each attempt)."""
DEFAULT_READ_TIMEOUT = 60.0
"""Seconds to wait for the first byte of an answer, and between its bytes."""
CONNECT_TIMEOUT_VAR = "METACOG_LLM_CONNECT_TIMEOUT"
READ_TIMEOUT_VAR = "METACOG_LLM_READ_TIMEOUT"


def resolve_timeouts(connect_timeout: float | None, read_timeout: float | None) -> tuple[float, float]:
    """(connect, read) seconds: the value given, else its environment variable
    (:data:`CONNECT_TIMEOUT_VAR`, :data:`READ_TIMEOUT_VAR`), else the default; ValueError naming
    the setting for anything but seconds > 0."""
    out = []
    for name, value, var, default in (("connect_timeout", connect_timeout, CONNECT_TIMEOUT_VAR, DEFAULT_CONNECT_TIMEOUT),
                                      ("read_timeout", read_timeout, READ_TIMEOUT_VAR, DEFAULT_READ_TIMEOUT)):
        if value is None:
            text = os.environ.get(var, "").strip()
            if not text:
                out.append(default)
                continue
            try:
                value = float(text)
            except ValueError:
                raise ValueError(f"${var}: expected seconds > 0, got {text!r}") from None
            if not (value > 0 and value != float("inf")):
                raise ValueError(f"${var}: expected seconds > 0, got {text!r}")
            out.append(value)
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value < float("inf")):
            raise ValueError(f"{name}: expected seconds > 0, got {value!r}")
        out.append(float(value))
    return out[0], out[1]


class _ConnectFailed(Exception):
    """An attempt that did not get a connection (carries the cause; retried)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class LLMHTTPError(RuntimeError):
    """The LLM server answered with an error status or a malformed body."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries with exponential backoff."""

    max_retries: int = 3
    """Retries after the first attempt (so at most ``max_retries + 1`` attempts)."""
    backoff_initial: float = 0.25
    """Seconds before the first retry."""
    backoff_factor: float = 2.0
    """Each further wait is this many times longer."""
    backoff_max: float = 4.0
    """Cap of a single wait."""

    def delay(self, retry: int) -> float:
        return min(self.backoff_initial * self.backoff_factor**retry, self.backoff_max)


class JsonHttpClient:
    """POST/GET JSON to ``base_url`` + path."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None,
        connect_timeout: float,
        read_timeout: float,
        retry: RetryPolicy,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base_url: expected http(s)://host[:port][/path], got {base_url!r}")
        for name, v in (("connect_timeout", connect_timeout), ("read_timeout", read_timeout)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 < v < float("inf")):
                raise ValueError(f"{name}: expected seconds > 0, got {v!r}")
        if not isinstance(retry.max_retries, int) or retry.max_retries < 0:
            raise ValueError(f"max_retries: expected an int >= 0, got {retry.max_retries!r}")
        self.base_url = base_url.rstrip("/")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")
        self._api_key = api_key or None
        self.connect_timeout = float(connect_timeout)
        self.read_timeout = float(read_timeout)
        self.retry = retry
        self.attempts = 0  # total attempts made, for diagnostics and tests

    def _redact(self, text: str) -> str:
        return text.replace(self._api_key, "***") if self._api_key else text

    def _once(self, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
        if self._https:
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                self._host, self._port, timeout=self.connect_timeout, context=ssl.create_default_context()
            )
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=self.connect_timeout)
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        try:
            try:
                conn.connect()
            except OSError as exc:
                raise _ConnectFailed(exc) from exc
            assert conn.sock is not None
            conn.sock.settimeout(self.read_timeout)
            conn.request(method, self._prefix + path, body=body, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def request(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        """Send one request (retrying as the policy allows); returns the decoded JSON body."""
        url = self.base_url + path
        body = json.dumps(payload).encode("utf-8") if payload is not None else None
        t0 = time.monotonic()
        last = ""
        tries = self.retry.max_retries + 1
        for attempt in range(tries):
            if attempt:
                time.sleep(self.retry.delay(attempt - 1))
            self.attempts += 1
            try:
                status, data = self._once(method, path, body)
            except _ConnectFailed as exc:
                cause = exc.cause
                last = f"{type(cause).__name__}: {cause}"
                if isinstance(cause, socket.timeout):
                    last += f" (no connection within connect_timeout={self.connect_timeout:g} s)"
                continue
            except socket.timeout as exc:  # connected, request sent, no answer in time: not retried
                raise LLMTimeoutError(self._redact(
                    f"LLM server {url} accepted the connection but sent no answer within "
                    f"read_timeout={self.read_timeout:g} s ({type(exc).__name__}: {exc}); not retried, the server "
                    f"is stuck or busy. A server that needs longer: HttpConfig(read_timeout=...) or "
                    f"${READ_TIMEOUT_VAR}")) from exc
            except (OSError, http.client.HTTPException) as exc:  # reset, cut off mid-answer, not HTTP
                last = f"{type(exc).__name__}: {exc}"
                continue
            if status >= 500 or status == 429:
                last = f"HTTP {status}: {data[:200].decode('utf-8', 'replace')}"
                continue
            if status >= 400:
                raise LLMHTTPError(
                    self._redact(f"LLM server {url} answered HTTP {status}: {data[:500].decode('utf-8', 'replace')}"),
                    status,
                )
            try:
                return json.loads(data)
            except ValueError as exc:
                raise LLMHTTPError(
                    self._redact(f"LLM server {url} sent malformed JSON ({exc}): {data[:200]!r}"), status
                ) from exc
        elapsed = time.monotonic() - t0
        msg = self._redact(f"LLM server {url} failed after {tries} attempts in {elapsed:.1f}s: {last}")
        if last.startswith("HTTP "):
            raise LLMHTTPError(msg, int(last[5:8]))
        raise LLMConnectionError(msg + " (is the server running and reachable?)")
