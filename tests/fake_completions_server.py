"""A small server on 127.0.0.1 that answers `POST /v1/completions` in vLLM's shape: a prompt
of token ids in; `choices[0]` with `text`, `logprobs` ({tokens: ["token_id:N", ...],
token_logprobs, top_logprobs, text_offset}) and `finish_reason` out. Replies come from a
function of (model, prompt ids, body) returning a Generation; every request body is kept.
`serve_json` is the HTTP part, for other fake OpenAI-shaped servers too."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from aworld_train.rollout.policies.client import Generation


class _Server(ThreadingHTTPServer):
    request_queue_size = 256  # the default backlog (5) refuses connections when many episodes ask at once
    daemon_threads = True


def serve_json(answer: Callable[[str, dict], tuple[int, dict]]) -> tuple[_Server, str]:
    """A threaded server on 127.0.0.1 whose every POST gets `answer(path, JSON body) -> (status,
    JSON payload)`, serving from a daemon thread; the server and its `/v1` base URL."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # quiet
            pass

        def do_POST(self) -> None:
            status, payload = answer(
                self.path, json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            )
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    httpd = _Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}/v1"


class FakeCompletionsServer:
    def __init__(
        self,
        reply: Callable[[str, list[int], dict], Generation],
        tokens_as_ids: bool = True,
        with_token_ids: bool = False,
    ) -> None:
        self.reply = reply
        self.tokens_as_ids = tokens_as_ids
        self.with_token_ids = with_token_ids  # vLLM >= 0.10.2 answers `return_token_ids` too
        self.bodies: list[dict] = []
        self.fail_next = 0  # answer this many requests with HTTP 503 first
        self.httpd, self.url = serve_json(self.answer)

    def answer(self, path: str, body: dict) -> tuple[int, dict]:
        if path != "/v1/completions":
            return 404, {"error": {"message": f"no route {path}"}}
        if self.fail_next > 0:
            self.fail_next -= 1
            return 503, {"error": {"message": "busy"}}
        self.bodies.append(body)
        if not isinstance(body.get("prompt"), list):
            return 400, {"error": {"message": "prompt must be token ids here"}}
        return 200, self.response(body, self.reply(body["model"], body["prompt"], body))

    def response(self, body: dict, gen: Generation) -> dict:
        tokens = [f"token_id:{i}" if self.tokens_as_ids else f"tok{i}" for i in gen.token_ids]
        choice = {
            "index": 0,
            "text": "(text)",
            "logprobs": {
                "text_offset": list(range(len(tokens))),
                "token_logprobs": list(gen.logprobs),
                "tokens": tokens,
                "top_logprobs": [{t: lp} for t, lp in zip(tokens, gen.logprobs, strict=True)],
            },
            "finish_reason": gen.finish_reason,
            "stop_reason": None,
        }
        if self.with_token_ids:
            choice["token_ids"] = list(gen.token_ids)
            choice["prompt_token_ids"] = list(body["prompt"])
        return {
            "id": "cmpl-fake",
            "object": "text_completion",
            "model": body["model"],
            "choices": [choice],
            "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": len(gen.token_ids)},
        }

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
