"""The protocol's `model` as a Threadline model string (`lm`): the provider is named by the model's family.

    offline                      -> offline (the deterministic model, no key, no network)
    gpt-4o-mini, o3, chatgpt-... -> openai:<model>
    claude-sonnet-4-5            -> anthropic:<model>
    openai:... / anthropic:...   -> as given

Any other name answers 400 `model_not_found` before anything is sent or recorded; a family whose
provider the worker lacks ends its turn `provider-unconfigured`, as on every other surface.
"""

from __future__ import annotations

import re

from core.errors import ErrorCode, ThreadlineError

_FAMILIES = (
    (re.compile(r"(gpt-|chatgpt-|o\d)[A-Za-z0-9._:-]*"), "openai"),
    (re.compile(r"claude-[A-Za-z0-9._-]+"), "anthropic"),
)
_NAMED = re.compile(r"(openai|anthropic):[A-Za-z0-9._/:-]{1,200}")


def model_of(model: str | None) -> str | None:
    """The `lm` for the protocol's `model` (None: the worker's default model).

    Raises:
        ThreadlineError: `invalid-request` (400, code `model_not_found`) for a model no provider serves.
    """
    if model is None or model == "offline" or _NAMED.fullmatch(model):
        return model
    for pattern, provider in _FAMILIES:
        if pattern.fullmatch(model):
            return f"{provider}:{model}"
    raise ThreadlineError(
        ErrorCode.INVALID_REQUEST,
        f"the model {model[:80]!r} does not exist here: use offline, a gpt-/o-series/claude- model, or provider:model",
        param="model",
        protocol_code="model_not_found",
    )
