"""`bench copy-ceiling`: its replay keeps, step for step, what the engine's own decode keeps."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from adaptivespec.bench.copy_ceiling import BEST, Copying, decode_requests, replay
from adaptivespec.bench.drafters import decode_all
from adaptivespec.bench.sibling_runners import model_free_proposer, sibling
from adaptivespec.engine.copy_proposer import CopyProposer
from adaptivespec.engine.loader import LoadedModels
from adaptivespec.engine.proposers import NgramProposer
from adaptivespec.engine.suffix_proposer import SuffixProposer, suffix_available

from ..conftest import TinyPair, engine_config

# Text that repeats itself (so the drafters find matches) and text that does not.
PROMPTS = [
    "def add(a, b):\n    return a + b\ndef add(a, b):\n",
    "for i in range(10):\n    print(i)\nfor i in range(10):\n    print(",
    "class Point:\n    def __init__(self",
    "import os\nimport sys\nprint(",
    "print(i)\nprint(i)\nprint(",
]
MAX_TOKENS = 40

if suffix_available():
    DRAFTERS = ("ngram", "suffix", "suffix-local", "copy")
elif os.environ.get("ADAPTIVESPEC_REQUIRE_SUFFIX"):
    raise RuntimeError("arctic-inference is not installed: run ops/install-suffix.sh")
else:
    DRAFTERS = ("ngram",)


def _maker(name: str, pair: TinyPair, k: int) -> Callable[[], Copying]:
    config = engine_config(pair, "ngram", max_batch=1, max_spec_tokens=k)

    def make() -> Copying:
        proposer = model_free_proposer(name, config)
        assert isinstance(proposer, NgramProposer | SuffixProposer | CopyProposer)
        return proposer

    return make


@pytest.mark.parametrize("k", [2, 5])
def test_the_replay_keeps_what_the_engine_keeps(
    tiny_pair: TinyPair, tiny_models: LoadedModels, k: int
) -> None:
    config = engine_config(tiny_pair, "ngram", max_batch=1, max_spec_tokens=k)
    requests = [tiny_models.tokenizer.encode(p) for p in PROMPTS]
    decoded = decode_requests(lambda: sibling(tiny_models.runner, None, config), requests, MAX_TOKENS, k)
    makers = {name: _maker(name, tiny_pair, k) for name in DRAFTERS}
    replayed = replay(decoded, makers, k)
    for name in DRAFTERS:
        runner = sibling(tiny_models.runner, makers[name](), config)
        try:
            engine = decode_all(runner, requests, k, MAX_TOKENS)
        finally:
            runner.close()
        assert [list(o) for o in engine.outputs] == [list(d.output) for d in decoded]
        assert replayed[name] == pytest.approx(engine.per_step, abs=1e-12), name
        assert 1.0 < replayed[name] < k + 1  # drafts were both kept and refused
    # With one drafter, the best draft at each step is its own.
    assert replay(decoded, {"ngram": makers["ngram"]}, k)[BEST] == replayed["ngram"]
