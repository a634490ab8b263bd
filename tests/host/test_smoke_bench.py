"""host/smoke_bench.py against a stand-in of vLLM's streaming completions endpoint (a real HTTP server on
loopback that streams one chunk per token at a known pace); the real engine answers it in
tests/test_e2e.py::test_outputs_say_what_was_deployed."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from host import smoke_bench, status

VOCAB = 100
FIRST_TOKEN_S = 0.05
PER_TOKEN_S = 0.01


class StandInEngine(BaseHTTPRequestHandler):
    """Streams max_tokens chunks: the first after FIRST_TOKEN_S, the others PER_TOKEN_S apart, then the
    usage event and [DONE], as vLLM does with stream_options.include_usage. A prompt with an id beyond its
    vocabulary of VOCAB gets vLLM's refusal: an error event in a stream that began with status 200."""

    bodies: ClassVar[list[dict[str, Any]]] = []
    # Set at the first completion request (the report test waits on it).
    asked = threading.Event()

    def log_message(self, *_: object) -> None:
        pass

    def do_GET(self) -> None:
        """/metrics as vLLM writes it: the requests it has received so far all count as running."""
        text = f'vllm:num_requests_running{{model_name="chat"}} {len(type(self).bodies)}.0\n'.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append(body)
        type(self).asked.set()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()

        def send(event: object) -> None:
            self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
            self.wfile.flush()

        if max(body["prompt"]) >= VOCAB:
            send({"error": {"message": f"Token id {max(body['prompt'])} is out of vocabulary", "code": 400}})
        else:
            time.sleep(FIRST_TOKEN_S)
            for index in range(body["max_tokens"]):
                if index:
                    time.sleep(PER_TOKEN_S)
                send({"choices": [{"index": 0, "text": f" t{index}"}]})
            send({"choices": [], "usage": {"completion_tokens": body["max_tokens"]}})
        self.wfile.write(b"data: [DONE]\n\n")


@pytest.fixture
def engine() -> Iterator[str]:
    StandInEngine.bodies = []
    StandInEngine.asked = threading.Event()
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandInEngine)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_ttft_is_to_the_first_text_and_tpot_spreads_the_rest_over_the_tokens_after_it() -> None:
    timed = smoke_bench.Timed(sent=10.0, chunks=(10.25, 10.30, 10.45), output_tokens=4)
    assert timed.ttft == pytest.approx(0.25)
    assert timed.tpot == pytest.approx(0.20 / 3)  # 4 tokens in 3 chunks: the engine's count, not the chunks'
    assert smoke_bench.Timed(sent=0.0, chunks=(0.1,), output_tokens=1).tpot is None


def test_times_each_request_as_the_client_sees_it(engine: str) -> None:
    report = smoke_bench.run(engine, "chat", requests=6, input_len=32, output_len=11, concurrency=2, vocab=64)
    assert report["requests"] == 6 and "error" not in report, report
    # The stand-in's pace is a floor (a sleep only oversleeps, and the client reads after the server sends);
    # bounds above it would time this machine's load, which a unit test does not judge.
    assert report["ttftMs"] >= FIRST_TOKEN_S * 1000 and report["tpotMs"] >= PER_TOKEN_S * 1000, report
    # Two at a time, each at least 50 + 10 x 10 ms: 66 tokens in no less than 3 x 150 ms.
    assert 0 < report["outputTokensPerSecond"] <= 66 / (3 * 0.15), report


def test_each_prompt_is_input_len_token_ids_below_the_vocabulary_and_ignores_eos(engine: str) -> None:
    smoke_bench.run(engine, "chat", requests=3, input_len=32, output_len=4, concurrency=3, vocab=64)
    assert len(StandInEngine.bodies) == 3
    for body in StandInEngine.bodies:
        assert body["model"] == "chat" and body["max_tokens"] == 4 and body["ignore_eos"] is True
        assert len(body["prompt"]) == 32 and all(0 <= token < 64 for token in body["prompt"])
        assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert len({tuple(body["prompt"]) for body in StandInEngine.bodies}) == 3, "each request its own prompt"


def test_a_refusal_streamed_under_200_is_an_error_not_numbers(engine: str) -> None:
    report = smoke_bench.run(engine, "chat", requests=2, input_len=32, output_len=4, concurrency=1, vocab=10_000)
    assert set(report) == {"error"} and "is out of vocabulary" in report["error"], report


def test_no_answer_is_an_error_not_numbers() -> None:
    report = smoke_bench.run("http://127.0.0.1:9", "chat", requests=2, input_len=4, output_len=4, concurrency=2)
    assert set(report) == {"error"} and "no request succeeded of 2" in report["error"], report


def test_the_vocabulary_comes_from_the_models_config(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 64}))
    assert smoke_bench.vocab_size(str(tmp_path)) == 64
    (tmp_path / "config.json").write_text(json.dumps({"text_config": {"vocab_size": 163840}}))
    assert smoke_bench.vocab_size(str(tmp_path)) == smoke_bench.DEFAULT_VOCAB  # capped: low ids are ordinary
    assert smoke_bench.vocab_size(str(tmp_path / "missing")) == smoke_bench.DEFAULT_VOCAB


def test_the_report_reads_the_load_before_the_benchmark_and_the_rest_while_it_runs(
    engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen_while_benchmarking: list[bool] = []

    def vllm_version(python: str) -> str:
        seen_while_benchmarking.append(StandInEngine.asked.wait(timeout=10))
        return "0.0.0"

    monkeypatch.setattr(status, "vllm_version", vllm_version)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps({"vocab_size": VOCAB}))
    spec = {
        "deployments": [
            {
                "owner": "dev.chat",
                "unit": "vllm-stand-in.service",  # no placement file: the report reaches the engine at frontDoor
                "frontDoor": engine,
                "stateDir": str(tmp_path / "state"),
                "modelDir": str(tmp_path / "model"),
                "python": "python3",
                "servedName": "chat",
                "bench": {"requests": 4, "inputLen": 8, "outputLen": 3, "concurrency": 2},
            }
        ]
    }
    found = status.report(spec, with_bench=True).deployments["dev.chat"]
    assert found.metrics == {"running": 0.0}, "read before the benchmark's own requests"
    assert found.bench is not None and found.bench["requests"] == 4 and len(StandInEngine.bodies) == 4, found
    assert seen_while_benchmarking == [True], "the facts are read while the benchmark runs, not after it"
    assert found.vllm_version == "0.0.0" and found.model is not None and found.model.describe() == "no manifest"
