"""The suite turns warnings into errors, except the SDK's one warning about a race it settles itself."""

import warnings

import pytest

LATE_CANCEL = "Cannot find activity to cancel for token b'\\n$01a2'"


def _warn(module: str) -> None:
    warnings.warn_explicit(LATE_CANCEL, UserWarning, "_activity.py", 227, module=module, registry={})


def test_the_sdk_warning_of_a_late_cancel_is_not_an_error() -> None:
    """A start-to-close timeout's cancel can arrive just after the activity finished; the SDK's
    activity worker warns from inside its poll loop, where an error would stop the test's worker
    (and hang the test that ran it). This checks the suite's filter, not a worker."""
    _warn("temporalio.worker._activity")


def test_the_same_warning_from_anywhere_else_is_an_error() -> None:
    with pytest.raises(UserWarning):
        _warn("threadline.worker")
