"""`adaptivespec bench serve`: N concurrent streaming HTTP clients against the same engine driven directly.

Both sides run in one process on one engine (the server's), alternating, with K pinned to the
same value, so the ratio measures what HTTP, SSE and the handlers cost, not the models.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from adaptivespec.config import DEMO_MODEL, DEVICES, EngineConfig, ModelConfig, ServeConfig
from adaptivespec.controller.overrides import Override
from adaptivespec.engine.engine import Engine
from adaptivespec.engine.sampling import SamplingParams
from adaptivespec.server.app import create_app
from adaptivespec.server.state import SERVICES


def register(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = kinds.add_parser("serve", help="HTTP streaming throughput against the engine's direct throughput")
    bench.add_argument("--clients", type=int, default=64)
    bench.add_argument("--max-tokens", type=int, default=64)
    bench.add_argument("--k", type=int, default=0, help="draft length pinned on both sides")
    bench.add_argument("--rounds", type=int, default=3)
    bench.add_argument("--backend", choices=("hf", "sim"), default="hf")
    bench.add_argument("--target", default=DEMO_MODEL)
    bench.add_argument("--draft", default=DEMO_MODEL)
    bench.add_argument("--device", choices=DEVICES, default="auto")
    bench.add_argument("--json", type=Path, default=None)


def run(args: argparse.Namespace) -> None:
    result = asyncio.run(_bench(args))
    print(f"{args.clients} clients x {args.max_tokens} tokens, K={args.k}:", end=" ")
    direct, http, ratio = result["direct_tok_s"], result["http_tok_s"], result["ratio"]
    print(f"direct {direct:.0f} tok/s, HTTP {http:.0f} tok/s, ratio {ratio:.3f}")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2))


async def _bench(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as state:
        models = ModelConfig(target=args.target, draft=args.draft, device=args.device)
        engine_config = EngineConfig(
            max_batch=args.clients,
            max_queued=args.clients,
            max_context=1024,
            threads=args.threads,
            models=models,
        )
        config = ServeConfig(
            backend=args.backend, port=0, db=f"sqlite:///{state}/bench.db", engine=engine_config
        )
        app = create_app(config)
        runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        services = app[SERVICES]
        services.controller.set_overrides((Override("pin", args.k),))
        prompts = [f"def function_{i}(x):\n    return" for i in range(args.clients)]
        params = SamplingParams(max_tokens=args.max_tokens, temperature=0.0, ignore_eos=True)
        direct, http = [], []
        try:
            await _direct(services.engine, prompts, params)  # warm-up
            for _ in range(args.rounds):
                direct.append(await _direct(services.engine, prompts, params))
                http.append(await _http(port, services.model_name, prompts, args.max_tokens))
        finally:
            await runner.cleanup()
    return {
        "clients": args.clients,
        "max_tokens": args.max_tokens,
        "k": args.k,
        "direct_tok_s_rounds": direct,
        "http_tok_s_rounds": http,
        "direct_tok_s": statistics.median(direct),
        "http_tok_s": statistics.median(http),
        "ratio": statistics.median(h / d for h, d in zip(http, direct, strict=True)),
    }


async def _direct(engine: Engine, prompts: list[str], params: SamplingParams) -> float:
    began = time.perf_counter()
    done = await asyncio.gather(*(engine.generate(p, params) for p in prompts))
    return sum(len(c.token_ids) for c in done) / (time.perf_counter() - began)


async def _http(port: int, model: str, prompts: list[str], max_tokens: int) -> float:
    url = f"http://127.0.0.1:{port}/v1/completions"

    async def one(session: aiohttp.ClientSession, prompt: str) -> int:
        body = {
            "model": model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
            "ignore_eos": True,
        }
        tokens = 0
        async with session.post(url, json=body) as response:
            async for line in response.content:
                if line.startswith(b"data: {") and b'"usage"' in line:
                    tokens = json.loads(line[6:])["usage"]["completion_tokens"]
        return tokens

    connector = aiohttp.TCPConnector(limit=len(prompts))
    async with aiohttp.ClientSession(connector=connector) as session:
        began = time.perf_counter()
        counts = await asyncio.gather(*(one(session, p) for p in prompts))
    return sum(counts) / (time.perf_counter() - began)
