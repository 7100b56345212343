"""`adaptivespec serve` as a real subprocess: the openai client, SIGTERM drain, and sd_notify."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from openai import OpenAI
from transformers import AutoTokenizer

from adaptivespec.engine.model_sources import SMOLLM2, ensure_packaged_model
from adaptivespec.server.openai_api import render_chat

from ..conftest import TinyPair


@dataclass
class Daemon:
    process: subprocess.Popen[str]
    port: int
    notifications: list[str]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _request(url: str, body: dict[str, object] | None = None) -> tuple[int, dict[str, object]]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _listen(path: Path, into: list[str], stop: threading.Event) -> threading.Thread:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(0.1)

    def receive() -> None:
        while not stop.is_set():
            try:
                into.append(sock.recv(4096).decode())
            except TimeoutError:
                continue
        sock.close()

    thread = threading.Thread(target=receive, daemon=True)
    thread.start()
    return thread


def _start(args: list[str], tmp_path: Path, env: dict[str, str] | None = None) -> Iterator[Daemon]:
    notifications: list[str] = []
    stop = threading.Event()
    listener = _listen(tmp_path / "notify.sock", notifications, stop)
    port = _free_port()
    env = (
        os.environ
        | (env or {})
        | {
            "NOTIFY_SOCKET": str(tmp_path / "notify.sock"),
            "WATCHDOG_USEC": "200000",
            "ADAPTIVESPEC_STATE_DIR": str(tmp_path / "state"),
        }
    )
    command = [
        sys.executable,
        "-m",
        "adaptivespec.cli",
        "--log-level",
        "debug",  # nothing a client sent may reach the logs, at any level
        "serve",
        "--port",
        str(port),
    ]
    command += args
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    running = Daemon(process, port, notifications)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if _request(f"{running.url}/health")[0] == 200:
                break
        except OSError:
            time.sleep(0.2)
    else:
        process.kill()
        pytest.fail(f"daemon did not become healthy: {process.communicate()[0]}")
    yield running
    if process.poll() is None:
        process.kill()
        process.wait()
    stop.set()
    listener.join()


@pytest.fixture
def daemon(tiny_pair: TinyPair, tmp_path: Path) -> Iterator[Daemon]:
    args = ["--target", str(tiny_pair.target), "--draft", str(tiny_pair.draft), "--device", "cpu"]
    args += ["--served-model-name", "tiny", "--dtype", "float32", "--max-context", "512"]
    yield from _start(args, tmp_path)


@pytest.fixture
def default_daemon(default_model_cache: Path, tmp_path: Path) -> Iterator[Daemon]:
    """`adaptivespec serve` with no model flags: the real default model, already in the cache."""
    yield from _start(["--device", "cpu"], tmp_path, {"ADAPTIVESPEC_CACHE_DIR": str(default_model_cache)})


@pytest.fixture(params=[60.0, 0.5], ids=["drain-completes", "drain-times-out"])
def sim_daemon(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Daemon]:
    """The simulator backend: long streams without model weights (its clock is virtual, not its speed)."""
    args = ["--backend", "sim", "--max-context", "200000", "--drain-timeout", str(request.param)]
    args += ["--served-model-name", "tiny"]
    yield from _start(args, tmp_path)


def test_openai_client_streams_with_usage(daemon: Daemon) -> None:
    client = OpenAI(base_url=f"{daemon.url}/v1", api_key="not-needed")
    assert [m.id for m in client.models.list()] == ["tiny"]
    plain = client.completions.create(model="tiny", prompt="def add", max_tokens=24, temperature=0)
    chunks = list(
        client.completions.create(
            model="tiny",
            prompt="def add",
            max_tokens=24,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage is not None
    assert text == plain.choices[0].text
    assert plain.usage is not None and usage.prompt_tokens == plain.usage.prompt_tokens
    assert usage.completion_tokens == plain.usage.completion_tokens
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    with pytest.raises(Exception, match="n=1"):
        client.completions.create(model="tiny", prompt="x", max_tokens=4, n=2)


def test_sigterm_drains_live_streams_then_exits_zero(
    sim_daemon: Daemon, request: pytest.FixtureRequest
) -> None:
    daemon = sim_daemon
    completes = "drain-completes" in request.node.name
    results: list[str | None] = []

    def stream(i: int) -> None:
        client = OpenAI(base_url=f"{daemon.url}/v1", api_key="not-needed", max_retries=0, timeout=120)
        chunks = client.completions.create(
            model="tiny", prompt=f"secret prompt {i}", max_tokens=30_000, stream=True
        )
        results.append([c.choices[0].finish_reason for c in chunks if c.choices][-1])

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)  # the streams are running
    daemon.process.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    assert _request(f"{daemon.url}/health")[0] == 503
    status, refused = _request(f"{daemon.url}/v1/completions", {"prompt": "x", "max_tokens": 2})
    assert status == 503 and refused["error"]["type"] == "server_error"  # type: ignore[index]
    for thread in threads:
        thread.join(timeout=120)
    assert daemon.process.wait(timeout=60) == 0
    assert results == ["length"] * 3 if completes else results == ["abort"] * 3
    time.sleep(0.3)
    states = [n for n in daemon.notifications if n in ("READY=1", "STOPPING=1")]
    assert states == ["READY=1", "STOPPING=1"]
    ready, stopping = daemon.notifications.index("READY=1"), daemon.notifications.index("STOPPING=1")
    assert "WATCHDOG=1" in daemon.notifications[ready:stopping]
    output = daemon.process.stdout.read() if daemon.process.stdout else ""
    assert "secret prompt" not in output  # prompts never reach the logs


def test_default_model_streams_chat_through_the_openai_client(
    default_daemon: Daemon, default_model_cache: Path
) -> None:
    client = OpenAI(base_url=f"{default_daemon.url}/v1", api_key="unused")
    assert [m.id for m in client.models.list()] == ["SmolLM2-135M-Instruct"]
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    chunks = list(
        client.chat.completions.create(
            model="smollm2-135m-instruct",  # the name it was asked for by, in any case
            messages=messages,  # type: ignore[arg-type]
            max_tokens=24,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "Paris" in text
    model_dir = ensure_packaged_model(SMOLLM2, root=default_model_cache, progress=False).path
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    ids = render_chat(tokenizer, messages)
    assert ids[0] == tokenizer.bos_token_id and ids.count(tokenizer.bos_token_id) == 3  # one per turn
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens == len(ids)
