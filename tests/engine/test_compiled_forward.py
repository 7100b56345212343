"""The compiled step: its graphs are all built at warm-up, and greedy output does not change."""

from __future__ import annotations

from dataclasses import replace

from adaptivespec.bench.step_variants import compare, compile_variants
from adaptivespec.engine.compiled_forward import compiled_graphs
from adaptivespec.engine.hf_runner import HFRunner
from adaptivespec.engine.loader import load_runner
from adaptivespec.engine.packed_linear import packed_layers
from adaptivespec.engine.runner import PrefillItem
from adaptivespec.engine.sampling import SamplingParams

from ..conftest import TinyPair, engine_config

GREEDY = SamplingParams(max_tokens=64, temperature=0.0, ignore_eos=True)
PROMPTS = [[5, 6, 7, 5, 6, 7, 5, 6], [9, 10, 11, 12], [13, 14, 13, 14, 13], [20, 21, 22]]


def test_warm_up_builds_every_graph_and_outputs_match_eager(tiny_pair: TinyPair) -> None:
    config = engine_config(tiny_pair, "ngram", max_batch=4)
    config = replace(config, models=replace(config.models, compile="on"))
    before = compiled_graphs()
    runner = load_runner(config, progress=False).runner  # compiles and warms up
    assert isinstance(runner, HFRunner)
    warmed = compiled_graphs()
    assert 0 < warmed - before <= 4  # batch 1 or more x one token or several, for the target alone

    # Serving: other batch sizes, every K, a growing context, rows refilled: no new graph.
    for k in (0, 3, 1):
        runner.prefill(0, [PrefillItem(prompt, GREEDY, seed=0) for prompt in PROMPTS])
        for batch in (4, 3, 1):
            for _ in range(3):
                runner.decode(batch, k)
    assert compiled_graphs() == warmed

    case = compare(runner, PROMPTS, 3, steps=5, variants=compile_variants(), repeats=1)
    assert case.mismatched_rows == {"eager": 0, "packed": 0, "compiled": 0}


def test_the_compiled_step_traces_torchs_linears_beside_packed_ones(tiny_pair: TinyPair) -> None:
    """`bench variants --compare compile` loads packed layers and compiles with them switched off."""
    runner = load_runner(engine_config(tiny_pair, "ngram", max_batch=4), progress=False).runner
    assert isinstance(runner, HFRunner)
    assert packed_layers(runner.models) > 0
    case = compare(runner, PROMPTS, 3, steps=5, variants=compile_variants(), repeats=1)
    assert case.mismatched_rows == {"eager": 0, "packed": 0, "compiled": 0}
    assert runner.target.compiled is not None
