"""Small wording rules every command shares (issue 34): a state is not repeated by its reason, a count
takes its noun's number."""

from __future__ import annotations

from llmb.figures import counted
from llmb.runs.jobs import state_text


def test_a_reason_that_only_repeats_the_state_is_not_shown():
    assert state_text("CANCELLED", "cancelled") == "CANCELLED"
    assert state_text("CANCELLED", " Cancelled ") == "CANCELLED"
    assert state_text("CANCELLED", None) == "CANCELLED"
    assert state_text("CANCELLED", "by the user at 10:11") == "CANCELLED - by the user at 10:11"
    assert state_text("FAILED", "exit code 1") == "FAILED - exit code 1"


def test_counts_take_their_nouns_number():
    assert [counted(n, "job") for n in (0, 1, 2, 1204)] == [
        "0 jobs",
        "1 job",
        "2 jobs",
        "1,204 jobs",
    ]
    assert counted(1, "comparison") == "1 comparison"
    assert counted(3, "directory", "directories") == "3 directories"
