"""vllm-fleet smoke benchmark: a few completions through a serving engine's OpenAI API, timed as a client
sees them (output tokens/s, median time to first token, median time per output token).

The report step runs it after each deploy of a deployment with smokeBenchmark set. It measures what
`vllm bench serve --dataset-name random --ignore-eos` measures, without being it: that tool imports vLLM
and loads the model's tokenizer to build its prompts, 10-15 s of CPU before its first request (measured on
the sandbox: the report step took 14.5 s of a 48 s swap, the benchmark's own requests under a second), and
a tokenizer that needs --trust-remote-code (Kimi's) stops it. Here each prompt is `inputLen` random token
ids sent as the prompt itself (the completions API takes token ids), so its length is exact without a
tokenizer, and `ignore_eos` makes every request produce `outputLen` tokens. Standard library only.

Usage: smoke_bench.py BASE_URL MODEL --requests N --input-len N --output-len N --concurrency N
       [--model-dir DIR (its config.json's vocab_size bounds the random ids)]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

# Random prompt ids stay below this unless the model's config says its vocabulary is smaller: low ids are
# ordinary tokens in every vocabulary we serve, where high ones may be reserved or special.
DEFAULT_VOCAB = 32000


class Timed(NamedTuple):
    """One request as the client saw it."""

    sent: float  # when it was sent
    chunks: tuple[float, ...]  # when each streamed chunk with text came
    output_tokens: int  # how many tokens the engine says it produced

    @property
    def ttft(self) -> float:
        return self.chunks[0] - self.sent

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first (None for a one-token answer)."""
        if self.output_tokens < 2:
            return None
        return (self.chunks[-1] - self.chunks[0]) / (self.output_tokens - 1)


def vocab_size(model_dir: str | None) -> int:
    """The vocabulary to draw prompt ids from: the model's config.json (text_config for multimodal models
    such as Kimi-K2.5), capped at DEFAULT_VOCAB."""
    if model_dir:
        try:
            config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
            size = config.get("vocab_size") or config.get("text_config", {}).get("vocab_size")
            if isinstance(size, int) and size > 0:
                return min(size, DEFAULT_VOCAB)
        except (OSError, ValueError, AttributeError):
            pass
    return DEFAULT_VOCAB


def prompts(count: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(length)] for _ in range(count)]


def sse_events(lines: Iterator[bytes]) -> Iterator[dict[str, Any]]:
    """The JSON events of a server-sent event stream, up to `data: [DONE]`."""
    for raw in lines:
        line = raw.decode("utf-8", errors="replace").strip()
        if not line.startswith("data:"):
            continue
        data = line[len("data:") :].strip()
        if data == "[DONE]":
            return
        yield json.loads(data)


def one_request(base_url: str, model: str, prompt: list[int], output_len: int, timeout: float) -> Timed:
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": output_len,
        "ignore_eos": True,  # vLLM's: every request yields output_len tokens, as vllm bench's --ignore-eos
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    request = urllib.request.Request(
        f"{base_url.rstrip('/')}/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
    )
    sent = time.perf_counter()
    chunks: list[float] = []
    tokens = 0
    with urllib.request.urlopen(request, timeout=timeout) as response:
        for event in sse_events(response):
            error = event.get("error")
            if error is not None:  # vLLM streams a refusal as an event, under status 200
                message = error.get("message", error) if isinstance(error, dict) else error
                raise RuntimeError(str(message)[:300])
            if any(choice.get("text") for choice in event.get("choices") or []):
                chunks.append(time.perf_counter())
            usage = event.get("usage")
            if usage:
                tokens = int(usage.get("completion_tokens", 0))
    if not chunks:
        raise RuntimeError("the engine streamed no text")
    return Timed(sent, tuple(chunks), tokens or len(chunks))


def run(
    base_url: str,
    model: str,
    requests: int,
    input_len: int,
    output_len: int,
    concurrency: int,
    vocab: int = DEFAULT_VOCAB,
    timeout: float = 120.0,
) -> dict[str, Any]:
    """Send `requests` completions, at most `concurrency` at once; the report's numbers, or an error."""

    def attempt(prompt: list[int]) -> Timed | str:
        try:
            return one_request(base_url, model, prompt, output_len, timeout)
        except (OSError, ValueError, RuntimeError) as error:
            return f"{error.__class__.__name__}: {error}"

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=min(concurrency, requests)) as pool:
        outcomes = list(pool.map(attempt, prompts(requests, input_len, vocab)))
    wall = time.perf_counter() - started
    timed = [outcome for outcome in outcomes if isinstance(outcome, Timed)]
    errors = [outcome for outcome in outcomes if isinstance(outcome, str)]
    if not timed:
        return {"error": f"no request succeeded of {requests}: {errors[0] if errors else 'none sent'}"[:400]}
    tpots = [t.tpot for t in timed if t.tpot is not None]
    report: dict[str, Any] = {
        "requests": len(timed),
        "outputTokensPerSecond": round(sum(t.output_tokens for t in timed) / wall, 1),
        "ttftMs": round(statistics.median(t.ttft for t in timed) * 1000, 1),
        "tpotMs": round(statistics.median(tpots) * 1000, 2) if tpots else 0.0,
    }
    if errors:
        report["failed"] = len(errors)
        report["error"] = errors[0][:400]
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("base_url")
    parser.add_argument("model")
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--input-len", type=int, default=32)
    parser.add_argument("--output-len", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--model-dir")
    args = parser.parse_args(argv)
    report = run(
        args.base_url,
        args.model,
        args.requests,
        args.input_len,
        args.output_len,
        args.concurrency,
        vocab_size(args.model_dir),
    )
    json.dump(report, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0 if "requests" in report else 1


if __name__ == "__main__":
    sys.exit(main())
