"""A scripted OpenAI-compatible chat completions server on loopback, for testing the LLM agent over real HTTP.

Each test queues the replies the server gives, in order; the server records every request body it saw.
A request with no scripted reply left gets HTTP 503, so a test that asks more than it scripted fails loudly.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Scripted:
    content: str | None = ""
    finish_reason: str = "stop"
    status: int = 200
    delay: float = 0.0  # seconds before answering
    usage: tuple[int, int] | None = (100, 50)  # prompt, completion tokens; None leaves usage out


class Stub:
    def __init__(self) -> None:
        self.replies: deque[Scripted] = deque()
        self.requests: list[dict[str, Any]] = []
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.url = ""

    def script(self, *replies: Scripted) -> None:
        self.replies.extend(replies)

    def prompts(self) -> list[str]:
        """The text of each request's messages, joined."""
        return ["\n".join(m["content"] for m in r["messages"]) for r in self.requests]

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, str]]:
        with self.lock:
            self.requests.append(body)
            reply = self.replies.popleft() if self.replies else None
        if reply is None:
            return 503, {"error": {"message": "no scripted reply left", "type": "server_error"}}, {}
        if reply.delay:
            self.stopping.wait(reply.delay)
        if reply.status != 200:
            error = {"error": {"message": f"scripted failure {reply.status}", "type": "server_error"}}
            return reply.status, error, {"retry-after-ms": "10"}  # keeps the SDK's backoff short
        completion: dict[str, Any] = {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "stub"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply.content},
                    "finish_reason": reply.finish_reason,
                }
            ],
        }
        if reply.usage is not None:
            p, c = reply.usage
            completion["usage"] = {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}
        return 200, completion, {}


class Handler(BaseHTTPRequestHandler):
    server: Server

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", 0))
        body = json.loads(self.rfile.read(length))
        if self.path.rstrip("/") != "/v1/chat/completions":
            status, payload, headers = 404, {"error": {"message": f"no route {self.path}"}}, {}
        else:
            status, payload, headers = self.server.stub.answer(body)
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up waiting (the timeout test)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, stub: Stub) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.stub = stub


@contextmanager
def serve() -> Iterator[Stub]:
    stub = Stub()
    server = Server(stub)
    stub.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        stub.stopping.set()  # cuts scripted delays short
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
