"""`adaptivespec train-draft`: builds a head once per target (by content), which `serve`'s
auto then drafts with; an interrupted run resumes and ends with the head it would have built."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from adaptivespec.cli import main
from adaptivespec.config import EngineConfig, ModelConfig
from adaptivespec.engine.eagle3_format import read_weights
from adaptivespec.engine.loader import load_runner
from adaptivespec.engine.suffix_proposer import suffix_available
from adaptivespec.train import head_trainer
from adaptivespec.train.head_trainer import TrainSettings
from adaptivespec.train.train_draft import DataSettings, train_draft

from ..conftest import CORPUS, TinyPair

SMALL = ["--prompts", "16", "--new-tokens", "16", "--draft-vocab", "200", "--epochs", "1", "--threads", "1"]


def _auto(pair: TinyPair) -> tuple[str, ...]:
    models = ModelConfig(target=str(pair.target), device="cpu", dtype="float32")
    return load_runner(
        EngineConfig(models=models, max_batch=2, max_context=64), progress=False
    ).runner.methods


def test_a_head_is_built_once_into_the_cache_and_auto_drafts_with_it(
    tiny_pair: TinyPair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ADAPTIVESPEC_CACHE_DIR", str(tmp_path / "cache"))
    text = tmp_path / "traffic.txt"
    text.write_text("".join(CORPUS[:4]))
    cheap = ("copy",) if suffix_available() else ("ngram",)
    assert _auto(tiny_pair) == cheap  # no head yet: the cheap drafters
    assert main(["train-draft", "--target", str(tiny_pair.target), "--text", str(text), *SMALL]) == 0
    out, err = capsys.readouterr()
    home = Path(out.strip().splitlines()[-1])  # the last line of stdout: the head's directory
    assert home.parent == tmp_path / "cache" / "eagle3" and (home / "config.json").is_file()
    assert "teacher:" in err and "training: step" in err  # it showed progress
    assert _auto(tiny_pair) == ("eagle3", *cheap)  # the head first, the controller choosing
    assert main(["train-draft", "--target", str(tiny_pair.target), "--text", str(text), *SMALL]) == 0
    again, err = capsys.readouterr()
    assert again.strip().splitlines()[-1] == str(home) and "already built" in err


def test_an_interrupted_run_resumes_and_builds_the_same_head(
    tiny_pair: TinyPair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = tmp_path / "traffic.txt"
    text.write_text("".join(CORPUS[:4]))
    data = DataSettings(prompts=24, new_tokens=16, draft_vocab=200, text=text)
    fit = TrainSettings(epochs=2, checkpoint_seconds=0.0)
    whole = train_draft(str(tiny_pair.target), tmp_path / "whole", data, fit, progress=False)

    real_step = head_trainer.HeadTrainer.train_step
    calls = {"n": 0}

    def interrupted(self: head_trainer.HeadTrainer, batch: object, total: int) -> dict[str, float]:
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real_step(self, batch, total)  # type: ignore[arg-type]

    monkeypatch.setattr(head_trainer.HeadTrainer, "train_step", interrupted)
    with pytest.raises(KeyboardInterrupt):
        train_draft(str(tiny_pair.target), tmp_path / "resumed", data, fit, progress=False)
    assert not (tmp_path / "resumed" / "config.json").exists()
    monkeypatch.setattr(head_trainer.HeadTrainer, "train_step", real_step)
    shards = sorted((tmp_path / "resumed.work").glob("shard-*.pt"))
    stamps = [p.stat().st_mtime_ns for p in shards]
    resumed = train_draft(str(tiny_pair.target), tmp_path / "resumed", data, fit, progress=False)
    assert [p.stat().st_mtime_ns for p in shards] == stamps  # the teacher's shards were kept
    ours, theirs = read_weights(resumed), read_weights(whole)
    assert ours.keys() == theirs.keys()
    for name in ours:
        torch.testing.assert_close(ours[name], theirs[name], rtol=0, atol=1e-6, msg=name)


def test_a_flag_that_cannot_work_is_named_before_any_model_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A text file that is not there (or not text), or a count that cannot be, fails at once with
    the flag's name: not minutes later, after the target has loaded, with a traceback."""
    monkeypatch.setenv("ADAPTIVESPEC_CACHE_DIR", str(tmp_path / "cache"))
    binary = tmp_path / "weights.bin"
    binary.write_bytes(bytes(range(256)))
    target = str(tmp_path / "no-model-here")  # would fail to load, with another message, if reached
    cases = {
        ("--text", str(tmp_path / "missing.txt")): "--text",
        ("--text", str(binary)): "UTF-8",
        ("--epochs", "0"): "--epochs must be positive",
        ("--lr", "-1"): "--lr must be positive",
        ("--prompts", "0"): "--prompts must be positive",
        ("--minutes", "-2"): "--minutes must be 0",
    }
    for flags, says in cases.items():
        assert main(["train-draft", "--target", target, *flags]) == 2, flags
        err = capsys.readouterr().err
        assert says in err and "no-model-here" not in err and "Traceback" not in err, (flags, err)
