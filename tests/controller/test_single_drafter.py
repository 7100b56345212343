"""Which one drafter an export runs where the learned table mixes drafters."""

from __future__ import annotations

from adaptivespec.controller import exports, single_drafter
from adaptivespec.controller.buckets import CONTEXT_BUCKETS
from adaptivespec.controller.exports import KTable

SHORT = CONTEXT_BUCKETS[0]


def test_a_table_that_mixes_drafters_exports_the_one_with_the_most_goodput() -> None:
    """vLLM runs one method: the kept drafter runs its own best K where the other was chosen,
    and the note says what was dropped."""
    k_by_bucket = {"1": 4, "2": 4, "3-4": 2, "5-8": 0}
    method_by_bucket = {"1": "suffix", "2": "suffix", "3-4": "ngram", "5-8": ""}
    options = {
        "1": {"suffix": (4, 300.0), "ngram": (3, 200.0)},
        "2": {"suffix": (4, 500.0), "ngram": (3, 450.0)},
        "3-4": {"suffix": (1, 600.0), "ngram": (2, 650.0)},
        "5-8": {"suffix": (0, 900.0), "ngram": (0, 900.0)},
    }
    drafter, tables, notes = single_drafter.one_drafter(
        [single_drafter.LearnedRow(k_by_bucket, method_by_bucket, options)]
    )
    assert drafter == "suffix" and tables == [{"1": 4, "2": 4, "3-4": 1, "5-8": 0}]
    assert len(notes) == 1 and "exported suffix" in notes[0] and "batch 3-4 chose ngram K=2" in notes[0]
    config, _ = exports.vllm(
        KTable.from_labels(SHORT, tables[0]), "smollm2+ngram2-3,suffix:float32", drafter=drafter
    )
    assert config["method"] == "suffix" and config["speculative_token_schedule"] == [
        [1, 2, 4],
        [3, 4, 1],
        [5, 8, 0],
    ]


def test_a_table_of_one_drafter_is_exported_as_learned() -> None:
    table = {"1": 4, "2": 3, "3-4": 0}
    methods = {"1": "ngram", "2": "ngram", "3-4": ""}
    one, same, none = single_drafter.one_drafter([single_drafter.LearnedRow(table, methods, {})])
    assert one == "ngram" and same == [table] and none == []
