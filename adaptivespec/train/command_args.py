"""The `train-draft` command's flags; importing this costs no torch (`--help` stays instant)."""

from __future__ import annotations

import argparse
from pathlib import Path

from adaptivespec.config import DEFAULT_MODEL

# Defaults, stated once here; train_draft.py's settings take them from the parsed flags.
# PROMPTS and EPOCHS are caps: the budget (MINUTES) decides how much of them a machine does.
PROMPTS, NEW_TOKENS, DRAFT_VOCAB, EPOCHS, LR, BATCH_SEQUENCES = 480, 128, 8192, 5.0, 2e-3, 8
MINUTES = 30.0


def register(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    train = commands.add_parser(
        "train-draft",
        help="train an EAGLE-3 head for a target from local text (serve --proposer auto then uses it)",
        parents=[common],
    )
    train.add_argument("--target", default=DEFAULT_MODEL, help="the model the head drafts for")
    train.add_argument(
        "--out", type=Path, help="where to write the head (default: the cache, by the target's content)"
    )
    train.add_argument(
        "--prompts", type=int, default=PROMPTS, help="the most prompts the target continues (see --minutes)"
    )
    train.add_argument("--new-tokens", type=int, default=NEW_TOKENS, help="tokens of each continuation")
    train.add_argument("--draft-vocab", type=int, default=DRAFT_VOCAB, help="ids the head drafts among")
    train.add_argument("--epochs", type=float, default=EPOCHS, help="the most epochs trained (see --minutes)")
    train.add_argument(
        "--minutes",
        type=float,
        default=MINUTES,
        help="the whole command's budget: the teacher stops at its share of it and training takes the "
        "rest, within --prompts and --epochs (0: no budget, all of both)",
    )
    train.add_argument("--lr", type=float, default=LR)
    train.add_argument(
        "--text",
        type=Path,
        help="a UTF-8 file of your own traffic's text to draw prompts from (default: the standard library)",
    )
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--threads", type=int, default=0, help="torch threads (default 0: every usable CPU)")
