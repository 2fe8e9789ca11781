"""OpenAI-compatible HTTP backend against real servers on loopback (nothing mocked).

A real llama-cpp-python server runs the same GGUF as the embedded backend; tiny
``http.server`` instances exercise retries, timeouts, the API key and the
OpenAI echo-logprob path of ``choose``.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import llama_cpp
import numpy as np
import pytest

from metacog_fast.llm import LLMConnectionError, LLMHTTPError, open_llm
from metacog_fast.llm.models import default_gguf

# llama-cpp-python's server defaults to top_k=40, min_p=0.05, repeat_penalty=1.1;
# these make it sample exactly like the embedded backend.
PLAIN_SAMPLING = {"top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0}
KEY = "sk-test-7f3a9c"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server_url():
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", default_gguf(), "--host", "127.0.0.1",
         "--port", str(port), "--n_ctx", "1024", "--n_threads", "1", "--logits_all", "False", "--verbose", "False",
         "--flash_attn", "True"],  # as the embedded backend (LlamaCppConfig.flash_attn)
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 120
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited: {proc.stderr.read().decode()[-2000:]}")
            try:
                urllib.request.urlopen(url + "/models", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("llama_cpp.server did not come up within 120 s")
                time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def embedded():
    backend = open_llm(n_threads=1, n_ctx=1024)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def remote(server_url):
    return open_llm(server_url, extra_body=PLAIN_SAMPLING, read_timeout=300.0)


def test_http_completion_equals_embedded_at_temperature_zero(remote, embedded):
    for prompt in ("The capital of France is", "You are in a kitchen. Your task is to heat an egg.\n> "):
        r = remote.complete(prompt, max_tokens=16)[0]
        e = embedded.complete(prompt, max_tokens=16)[0]
        assert r.text == e.text
        assert r.prompt_tokens == e.prompt_tokens and r.completion_tokens == e.completion_tokens
        assert r.finish_reason == e.finish_reason and r.seconds > 0


def test_http_chat_equals_embedded(remote, embedded):
    msgs = [{"role": "user", "content": "What is 2+2?"}]
    assert remote.chat(msgs, max_tokens=20)[0].text == embedded.chat(msgs, max_tokens=20)[0].text


def test_http_n_samples_and_seeds_equal_embedded(remote, embedded):
    # The server ignores n; the backend asks again for the missing samples with seed + i.
    kw = dict(n=3, temperature=0.9, max_tokens=8, seed=5)
    r = [c.text for c in remote.complete("My favourite animal is", **kw)]
    e = [c.text for c in embedded.complete("My favourite animal is", **kw)]
    assert len(r) == 3 and r == e


def test_http_stop_strings(remote):
    c = remote.complete("Count: 1, 2, 3,", max_tokens=30, stop=[", 6"])[0]
    assert ", 6" not in c.text and c.finish_reason == "stop" and c.text.startswith(" 4, 5")


def test_http_constrained_uses_the_server_grammar(remote):
    assert remote.constraint_mode() == "grammar"
    options = ["take egg 1", "look", 'say "hi"']
    out = remote.complete("You are in a kitchen.\n> ", choices=options, n=3, temperature=1.2, seed=2)
    assert all(c.text in options and c.constrained_by == "grammar" for c in out)


def test_http_choose_refuses_misaligned_server_logprobs(remote):
    with pytest.raises(LLMHTTPError, match="1983"):
        remote.choose("The capital of France is", [" Paris", " London"])


# ------------------------------------------------------------------ tiny servers
class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # keep test output clean
        pass

    def _send(self, status: int, payload: object) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _serve(handler_cls):
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler_cls)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}/v1"


def _completion_json(text: str) -> dict:
    return {"choices": [{"text": text, "index": 0, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}


def test_retries_5xx_with_backoff_and_sends_the_key(monkeypatch):
    seen = {"n": 0, "auth": []}

    class Flaky(_Handler):
        def do_POST(self):
            seen["n"] += 1
            seen["auth"].append(self.headers.get("Authorization"))
            self.rfile.read(int(self.headers["Content-Length"]))
            if seen["n"] <= 2:
                self._send(500, {"error": "try again"})
            else:
                self._send(200, _completion_json(" ok"))

    monkeypatch.setenv("METACOG_LLM_API_KEY", KEY)
    srv, url = _serve(Flaky)
    try:
        llm = open_llm(url, model="m", max_retries=3, backoff_initial=0.05)
        out = llm.complete("hi", max_tokens=2)
        assert out[0].text == " ok" and out[0].prompt_tokens == 3 and out[0].completion_tokens == 2
        assert seen["n"] == 3 and llm.client.attempts == 3
        assert seen["auth"] == [f"Bearer {KEY}"] * 3
        assert KEY not in repr(llm.config)
    finally:
        srv.shutdown()


def test_persistent_5xx_gives_up_without_leaking_the_key(monkeypatch):
    class Broken(_Handler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self._send(503, {"error": f"echo {self.headers.get('Authorization')}"})

    monkeypatch.delenv("METACOG_LLM_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    srv, url = _serve(Broken)
    try:
        llm = open_llm(url, model="m", max_retries=2, backoff_initial=0.01)
        with pytest.raises(LLMHTTPError) as err:
            llm.complete("hi", max_tokens=2)
        assert err.value.status == 503 and url in str(err.value) and "3 attempts" in str(err.value)
        assert KEY not in str(err.value)
    finally:
        srv.shutdown()


def test_client_errors_are_not_retried():
    class Bad(_Handler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self._send(400, {"error": "bad request"})

    srv, url = _serve(Bad)
    try:
        llm = open_llm(url, model="m", max_retries=3, backoff_initial=0.01)
        with pytest.raises(LLMHTTPError, match="HTTP 400"):
            llm.complete("hi", max_tokens=2)
        assert llm.client.attempts == 1
    finally:
        srv.shutdown()


def test_malformed_answer_is_a_clear_error():
    class Garbage(_Handler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            body = b"{not json"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv, url = _serve(Garbage)
    try:
        with pytest.raises(LLMHTTPError, match="malformed JSON"):
            open_llm(url, model="m").complete("hi")
    finally:
        srv.shutdown()


def test_stopped_server_gives_a_clear_error_within_the_timeout():
    srv, url = _serve(_Handler)
    srv.shutdown()
    srv.server_close()
    llm = open_llm(url, model="m", connect_timeout=1.0, max_retries=2, backoff_initial=0.1)
    t0 = time.monotonic()
    with pytest.raises(LLMConnectionError) as err:
        llm.complete("hi")
    elapsed = time.monotonic() - t0
    assert url in str(err.value) and "3 attempts" in str(err.value)
    # Three refused connects plus 0.1 + 0.2 s of backoff; bounded by the timeouts.
    assert elapsed < 3 * 1.0 + 0.3 + 1.0


def test_read_timeout_is_bounded():
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(8)  # accepts connections (backlog) but never answers
    url = f"http://127.0.0.1:{lsock.getsockname()[1]}/v1"
    try:
        llm = open_llm(url, model="m", read_timeout=0.3, max_retries=1, backoff_initial=0.05)
        t0 = time.monotonic()
        with pytest.raises(LLMConnectionError, match="timed out"):
            llm.complete("hi")
        assert time.monotonic() - t0 < 2 * (0.3 + 1.0) + 0.05
    finally:
        lsock.close()


@pytest.fixture(scope="module")
def echo_server():
    """A real OpenAI-semantics echo-logprob server (what vLLM's does), computed with llama.cpp."""
    ll = llama_cpp.Llama(default_gguf(), n_ctx=512, n_threads=1, logits_all=True, flash_attn=True, verbose=False)

    class Echo(_Handler):
        def do_GET(self):
            self._send(200, {"data": [{"id": "smol", "owned_by": "vllm"}]})

        def do_POST(self):
            req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if not req.get("echo"):
                # A server that ignores the guided-choice field: free text, not one of the options.
                self._send(200, _completion_json(" I think I will"))
                return
            toks = ll.tokenize(req["prompt"].encode(), add_bos=True, special=True)
            ll.reset()
            ll.eval(toks)
            pieces = [ll.detokenize([t]).decode() for t in toks]
            offsets = list(np.cumsum([0] + [len(p) for p in pieces[:-1]]))
            lps = [None]
            for i in range(1, len(toks)):
                row = ll.scores[i - 1].astype(np.float64)
                m = row.max()
                lps.append(float(row[toks[i]] - m - np.log(np.exp(row - m).sum())))
            self._send(200, {"choices": [{"text": req["prompt"], "index": 0, "finish_reason": "length",
                                          "logprobs": {"tokens": pieces, "text_offset": [int(o) for o in offsets],
                                                       "token_logprobs": lps}}],
                             "usage": {"prompt_tokens": len(toks), "completion_tokens": 1}})

    srv, url = _serve(Echo)
    yield url
    srv.shutdown()
    ll.close()


def test_http_choose_with_echo_logprobs_equals_embedded(echo_server, embedded):
    # The server tokenizes prompt + option jointly, the embedded backend separately: pick a
    # prompt and options whose joint tokenization is the concatenation, so both mean the same.
    prompt = "You are in a kitchen. Your task is to heat an egg.\n>"
    options = [" go to fridge 1", " open microwave 1", " look", " inventory"]
    tok = embedded.session.tokenize
    for o in options:
        assert tok(prompt + o, bos=True, special=True) == tok(prompt, bos=True, special=True) + tok(o, bos=False, special=False)
    remote = open_llm(echo_server)
    r = remote.choose(prompt, options)
    e = embedded.choose(prompt, options)
    assert r.index == e.index
    np.testing.assert_allclose(r.logprobs, e.logprobs, rtol=0, atol=1e-3)
    # Constrained generation on a server whose guided choice is ignored falls back to choose, and says so.
    out = remote.complete(prompt, choices=options)
    assert out[0].constrained_by == "choose" and out[0].choice_index == e.index


def test_http_uri_errors():
    with pytest.raises(ValueError, match="host:port"):
        open_llm("http:///v1")
    with pytest.raises(ValueError, match="constrained"):
        open_llm("http://127.0.0.1:1/v1", constrained="regex")
    with pytest.raises(TypeError, match="unknown option"):
        open_llm("http://127.0.0.1:1/v1", n_gpu_layers=3)


def test_native_n_from_one_response_and_token_totals():
    seen = []

    class Multi(_Handler):
        def do_POST(self):
            req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append(req)
            self._send(200, {"choices": [{"text": f" s{i}", "index": i, "finish_reason": "length"} for i in range(req["n"])],
                             "usage": {"prompt_tokens": 4, "completion_tokens": 7 * req["n"]}})

    srv, url = _serve(Multi)
    try:
        llm = open_llm(url, model="m", extra_body={"top_k": 5})
        out = llm.complete("hi", n=3, max_tokens=7, temperature=0.7, seed=9, stop="\n")
        assert [c.text for c in out] == [" s0", " s1", " s2"] and len(seen) == 1
        assert seen[0]["n"] == 3 and seen[0]["seed"] == 9 and seen[0]["stop"] == ["\n"] and seen[0]["top_k"] == 5
        assert all(c.completion_tokens is None and c.finish_reason == "length" for c in out)
        assert llm.history[-1].completion_tokens == 21 and llm.usage.completion_tokens == 21
    finally:
        srv.shutdown()


def test_http_generate_many_equals_one_request_per_prompt(remote):
    prompts = ["The capital of France is", "My favourite animal is", "Count: 1, 2, 3,"]
    many = remote.generate_many(prompts, max_tokens=8, temperature=[0.0, 0.9, 0.0], seed=[0, 5, 0])
    one = [remote.complete(p, max_tokens=8, temperature=t, seed=s)[0].text
           for p, t, s in zip(prompts, [0.0, 0.9, 0.0], [0, 5, 0])]
    assert [c.text for c in many] == one


def test_http_many_keeps_at_most_max_concurrency_requests_in_flight():
    state = {"now": 0, "peak": 0, "prompts": []}
    lock = threading.Lock()

    class Slow(_Handler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                state["now"] += 1
                state["peak"] = max(state["peak"], state["now"])
                state["prompts"].append(body["prompt"])
            time.sleep(0.15)
            with lock:
                state["now"] -= 1
            self._send(200, _completion_json(" " + body["prompt"].upper()))

    srv, url = _serve(Slow)
    try:
        llm = open_llm(url, model="m", max_concurrency=3)
        prompts = [f"p{i}" for i in range(10)]
        out = llm.generate_many(prompts, max_tokens=2)
        assert [c.text for c in out] == [" " + p.upper() for p in prompts]  # in order
        assert sorted(state["prompts"]) == sorted(prompts)
        assert 2 <= state["peak"] <= 3
        with pytest.raises(ValueError, match="max_concurrency: expected an int >= 1"):
            open_llm(url, model="m", max_concurrency=0)
    finally:
        srv.shutdown()
