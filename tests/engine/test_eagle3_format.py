"""The heads adaptivespec writes are speculators' EAGLE-3 format: speculators' own `Eagle3DraftModel`
loads them and computes what ours computes; and a head's directory reads back as written.

speculators pins an older transformers than ours, so its check runs in an environment of its
own (`ops/install-speculators.sh`), named by ADAPTIVESPEC_SPECULATORS_PYTHON; CI sets it and
ADAPTIVESPEC_REQUIRE_SPECULATORS, which turns the skip into a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest
import torch

from adaptivespec.config import is_eagle3_dir
from adaptivespec.engine.eagle3_format import default_aux_layers, read_spec, read_weights
from adaptivespec.engine.eagle3_proposer import load_head
from adaptivespec.engine.loader import load_model
from adaptivespec.errors import ModelLoadError

from ..conftest import TinyPair

SPECULATORS = os.environ.get("ADAPTIVESPEC_SPECULATORS_PYTHON")
REQUIRED = os.environ.get("ADAPTIVESPEC_REQUIRE_SPECULATORS") == "1"

# In speculators' environment: load the head with its own class, run one step of its forward
# on given inputs, and print what it drafts.
_CHECK = textwrap.dedent(
    """
    import json, sys, torch
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
    head_dir, inputs = sys.argv[1], torch.load(sys.argv[2])
    config = Eagle3SpeculatorConfig.from_pretrained(head_dir)
    config.transformer_layer_config._attn_implementation = "eager"  # flex attention wants a GPU
    model = Eagle3DraftModel.from_pretrained(head_dir, config=config)
    model.embed_tokens.weight.data.copy_(inputs["embed"])
    model.eval()
    with torch.no_grad():
        drafts = model(
            hidden_states=inputs["aux"], input_ids=inputs["ids"],
            document_ids=torch.zeros_like(inputs["ids"]), position_ids=inputs["positions"], ttt_steps=1,
        )
    print(json.dumps({"type": type(model).__name__, "drafts": drafts[0][0].tolist(),
                      "layers": model.config.eagle_aux_hidden_state_layer_ids}))
    """
)


# In speculators' environment: a head built by its own `Eagle3DraftModel` for a target of the
# given shape, its weights drawn at a scale that keeps the drafts clear of ties, saved by its
# own `save_pretrained` (its embedding and vocabulary maps included), then what it drafts.
_WRITE = textwrap.dedent(
    """
    import json, sys, torch
    from transformers import LlamaConfig
    from speculators.config import SpeculatorsConfig, VerifierConfig
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
    from speculators.proposals.greedy import GreedyTokenProposalConfig
    head_dir, shape, inputs = sys.argv[1], json.loads(sys.argv[2]), torch.load(sys.argv[3])
    layer = LlamaConfig(**shape, num_hidden_layers=1)
    layer._attn_implementation = "eager"  # flex attention wants a GPU
    config = Eagle3SpeculatorConfig(
        transformer_layer_config=layer, draft_vocab_size=shape["vocab_size"] // 3,
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3", default_proposal_method="greedy",
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=3)],
            verifier=VerifierConfig(name_or_path=None, architectures=[]),
        ),
    )
    model = Eagle3DraftModel(config)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in model.parameters():
            noise = torch.randn(param.shape, generator=generator)
            param.copy_(1.0 + noise if param.dim() == 1 else noise * param.shape[-1] ** -0.5)
    ids = torch.randperm(shape["vocab_size"], generator=generator)[: config.draft_vocab_size].sort().values
    t2d = torch.zeros(shape["vocab_size"], dtype=torch.bool)
    t2d[ids] = True
    model.load_vocab_mappings(t2d, ids - torch.arange(len(ids)))
    model.save_pretrained(head_dir)
    model.eval()
    with torch.no_grad():
        drafts = model(
            hidden_states=inputs["aux"], input_ids=inputs["ids"],
            document_ids=torch.zeros_like(inputs["ids"]), position_ids=inputs["positions"], ttt_steps=1,
        )
    print(json.dumps({"drafts": drafts[0][0].tolist(), "maps": t2d.sum().item()}))
    """
)


def _our_drafts(head_dir: Path, target_dir: Path, inputs: dict[str, torch.Tensor]) -> list[int]:
    target = load_model(
        str(target_dir), torch.device("cpu"), torch.float32, 1, attention="sdpa", linear="torch"
    )
    head = load_head(str(head_dir), target)
    width = inputs["ids"].shape[1]
    mask = torch.ones(width, width, dtype=torch.bool).tril().view(1, 1, width, width)
    with torch.no_grad():
        embeds = head.embedding(target)(inputs["ids"])
        _, logits = head(embeds, head.fuse(inputs["aux"]), inputs["positions"], mask, None)
    return logits.argmax(-1)[0].tolist()


def test_speculators_loads_our_head_and_drafts_what_we_draft(
    tiny_pair: TinyPair, tiny_head: Path, tmp_path: Path
) -> None:
    python = _speculators_python()
    spec = read_spec(tiny_head)
    generator = torch.Generator().manual_seed(0)
    width, hidden = 12, int(spec.layer_config["hidden_size"])
    target = load_model(
        str(tiny_pair.target), torch.device("cpu"), torch.float32, 1, attention="sdpa", linear="torch"
    )
    inputs = {
        "ids": torch.randint(0, 300, (1, width), generator=generator),
        "aux": torch.randn(1, width, 3 * hidden, generator=generator),
        "positions": torch.arange(1, width + 1).unsqueeze(0),
        "embed": target.get_input_embeddings().weight.detach().clone(),
    }
    torch.save(inputs, tmp_path / "inputs.pt")
    script = tmp_path / "check.py"
    script.write_text(_CHECK)
    run = subprocess.run(
        [python, str(script), str(tiny_head), str(tmp_path / "inputs.pt")],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    theirs = json.loads(run.stdout.strip().splitlines()[-1])
    assert theirs["type"] == "Eagle3DraftModel"
    assert theirs["layers"] == list(spec.aux_layers or ())
    assert theirs["drafts"] == _our_drafts(tiny_head, tiny_pair.target, inputs)  # draft ids, argmax


def _speculators_python() -> str:
    if SPECULATORS is None:
        if REQUIRED:
            pytest.fail("ADAPTIVESPEC_REQUIRE_SPECULATORS is set but ADAPTIVESPEC_SPECULATORS_PYTHON is not")
        pytest.skip(
            "speculators' environment not given (ops/install-speculators.sh, ADAPTIVESPEC_SPECULATORS_PYTHON)"
        )
    return SPECULATORS


def test_we_load_a_head_speculators_wrote_and_draft_what_it_drafts(
    tiny_pair: TinyPair, tmp_path: Path
) -> None:
    """The other direction: a head as a GPU host's speculators training leaves it (its own
    config, its own embedding, a reduced vocabulary) serves here as it drafts there."""
    python = _speculators_python()
    config = json.loads((tiny_pair.target / "config.json").read_text())
    shape = {
        key: config[key]
        for key in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                    "vocab_size", "rms_norm_eps", "max_position_embeddings")
    }  # fmt: skip
    generator = torch.Generator().manual_seed(0)
    width = 12
    inputs = {
        "ids": torch.randint(0, shape["vocab_size"], (1, width), generator=generator),
        "aux": torch.randn(1, width, 3 * shape["hidden_size"], generator=generator),
        "positions": torch.arange(1, width + 1).unsqueeze(0),
    }
    torch.save(inputs, tmp_path / "inputs.pt")
    script = tmp_path / "write.py"
    script.write_text(_WRITE)
    head_dir = tmp_path / "their-head"
    run = subprocess.run(
        [python, str(script), str(head_dir), json.dumps(shape), str(tmp_path / "inputs.pt")],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    theirs = json.loads(run.stdout.strip().splitlines()[-1])
    assert is_eagle3_dir(head_dir)
    assert "embed_tokens.weight" in read_weights(head_dir)  # speculators keeps its own copy
    assert read_spec(head_dir).draft_vocab_size == theirs["maps"] < shape["vocab_size"]
    assert len(set(theirs["drafts"])) > 1  # drafts that depend on their inputs
    assert theirs["drafts"] == _our_drafts(head_dir, tiny_pair.target, inputs)  # draft ids, argmax


def test_a_head_directory_reads_back_as_written(tiny_head: Path) -> None:
    assert is_eagle3_dir(tiny_head)
    spec = read_spec(tiny_head)
    raw = json.loads((tiny_head / "config.json").read_text())
    assert raw["speculators_model_type"] == "eagle3"
    assert raw["transformer_layer_config"]["model_type"] == "llama"
    assert raw["eagle_aux_hidden_state_layer_ids"] == list(spec.aux_layers or ())
    weights = read_weights(tiny_head)
    assert weights["d2t"].shape == (spec.draft_vocab_size,)
    assert int(weights["t2d"].sum()) == spec.draft_vocab_size
    assert weights["layers.0.self_attn.q_proj.weight"].shape[1] == 2 * int(spec.layer_config["hidden_size"])
    assert "embed_tokens.weight" not in weights  # the target's own, as speculators allows


def test_a_head_for_another_target_is_refused_with_the_reason(
    tiny_pair: TinyPair, tiny_head: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other-head"
    other.mkdir()
    raw = json.loads((tiny_head / "config.json").read_text())
    raw["transformer_layer_config"]["hidden_size"] = 128
    (other / "config.json").write_text(json.dumps(raw))
    (other / "model.safetensors").write_bytes((tiny_head / "model.safetensors").read_bytes())
    target = load_model(
        str(tiny_pair.target), torch.device("cpu"), torch.float32, 1, attention="sdpa", linear="torch"
    )
    with pytest.raises(ModelLoadError, match="trained for another target"):
        load_head(str(other), target)


def test_the_default_auxiliary_layers_are_distinct_layers_of_any_target() -> None:
    """speculators' default (2, L // 2, L - 3) names layer 3 twice for a 6-layer target (the
    demo's): a head built for it with no ids of its own must still load, so there the three
    spread over the target instead; deeper targets keep speculators' choice."""
    for layers in range(2, 81):
        ids = default_aux_layers(layers)
        assert len(ids) == len(set(ids)) == 3 and all(0 <= i <= layers for i in ids), layers
    assert default_aux_layers(6) == (0, 3, 6)
    assert default_aux_layers(30) == (2, 15, 27)  # speculators' own for SmolLM2-135M
