"""The patches of the conversation workflow, with one marker per run instead of one per patch.

Every `workflow.patched(id)` a run takes writes a marker to its history, and the SDK upserts the
`TemporalChangeVersion` search attribute with it, listing every patch so far: a run that took four
patches paid eight events. `LEAN` is the patch of a run whose code has every patch named before it:
a run that has it asks no older patch (`since`), and its history holds one marker. Patches
released with it (`_turns.AT_ONCE`) are asked through `since` too: no run has one without the other. A run without it
(recorded before, or started by a worker from before) asks each patch as it always did, so its
history replays unchanged. A newer patch is asked with `workflow.patched` as before (a later id can
stand for it and `LEAN` together the same way). Deterministic: the answer is the run's history.
"""

from __future__ import annotations

from temporalio import workflow

LEAN = "lean-history"
"""Runs from before it ask each older patch on its own, carry each outcome with its model and usage
(`_state.RunState.carried`), and write every search attribute each time (`_upkeep.Upkeep.publish`)."""
LEANER = "lean-history-2"
"""Stands for `LEAN` and what came after it: runs from before it carry the 20 newest outcomes over
continue-as-new, where a run that has it carries the newest and those of sends that did not end
`done`, and answers a `wait` or `begun` for an earlier send from the record log; it also takes
what the run before handed over (`ConversationState.accounted`, `.flow`) instead of looking for lost
turns and reading the flow back (a run begun by a worker from before looked and read: it replays so)."""

LEANEST = "lean-history-3"
"""Stands for `LEANER` and what came after it: runs from before it write the search attributes as
each turn ends with nothing else to do, and before they continue as new; a run that has it writes
them at most once per interval (`_upkeep.Upkeep.keep_up`) and hands them to the next run in its
continue-as-new."""

OPENS = "lean-history-4"
"""Stands for `LEANEST` and what came after it: a run from before it that begins a conversation (or
reopens one) looks for lost turns and reads the flow back in two local activities before its first
send; a run that has it leaves both to its first send's step (`place_and_run` with `opening`), which
reads the same log to place the send, when that send is the first thing it does
(`_turns.Turns.opening`)."""


def lean() -> bool:
    """Whether this run has `LEAN` (or `LEANER`, which stands for it): asked first in the run's first
    workflow task (`ConversationWorkflow`), so a run has it from its start or not at all."""
    return leaner() or workflow.patched(LEAN)


def leaner() -> bool:
    """Whether this run has `LEANER` (or `LEANEST`, which stands for it)."""
    return leanest() or workflow.patched(LEANER)


def leanest() -> bool:
    """Whether this run has `LEANEST` (or `OPENS`, which stands for it)."""
    return opens() or workflow.patched(LEANEST)


def opens() -> bool:
    """Whether this run has `OPENS`: a new run has it and writes its one marker."""
    return workflow.patched(OPENS)


def since(patch: str) -> bool:
    """`workflow.patched(patch)`, for a patch older than `LEAN`: true without a marker of its own in a
    run that has `LEAN` (its code has `patch` too)."""
    return lean() or workflow.patched(patch)
