"""An HTTP fuzz of the service from its own OpenAPI schema (schemathesis): valid and invalid requests
to every route, against a real service, worker and dev server on loopback. Every answer is a status
the schema documents for its route, an error is always `{"error": {"code", "message"}}` with a
known code, and nothing answers 500."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.core.failures import Failure, FailureGroup
from schemathesis.core.transport import Response
from schemathesis.specs.openapi.checks import status_code_conformance
from temporalio.worker import Worker

from core.errors import ErrorCode
from tests.support.service_kit import serving
from threadline.client import Threadline
from threadline.http import create_app
from threadline.http.openai_errors import is_protocol

EXAMPLES = 12
"""Requests per route, mode and round. At 20 the fuzz took 153 s alone and past 300 s in a whole test
run (whose other tests share the machine's two cores)."""
QUICK = {"/v1/conversations/{conversation_id}/records/wait": {"timeout": 0.1}}
"""Query values fixed on every round: a long poll's generated timeouts would make the fuzz wait minutes."""
SCHEDULE_EXAMPLES = 5
"""Requests per schedule route, mode and round: each valid one makes a Temporal Schedule (some firing every
second into the conversation), and listing describes every one, so more would only slow the fuzz."""
BUDGET_S = 330.0
"""The fuzz stops sending after this long and says so: its thread then ends before the test's own time
limit. A thread still fuzzing after its test was timed out held the test session's end (the loop waits
for its executor's threads), and the last test of that session failed too."""
CODES = frozenset(code.value for code in ErrorCode)
PROTOCOL_CODES = frozenset(
    {code.replace("-", "_") for code in CODES}
    | {"invalid_api_key", "permission_denied", "not_found", "conversation_locked", "response_state", "model_not_found"}
)
"""The `code`s of the OpenAI protocol's errors (`/openai/v1`): ours in its spelling, and its own names."""


def problem_of(case: schemathesis.Case[Any], response: Response) -> str | None:
    """What is wrong with `response`, or None: a 500, an undocumented status, an uncoded error body."""
    where = f"{case.method} {case.formatted_path} -> {response.status_code}"
    try:
        case.validate_response(response, checks=[status_code_conformance])
    except (Failure, FailureGroup) as err:
        return f"{where}: {' '.join(line.strip() for line in str(err).splitlines() if line.strip())[:400]}"
    return coding_problem(where, response.status_code, response.text, protocol=is_protocol(case.path))


def coding_problem(where: str, status: int, text: str, *, protocol: bool = False) -> str | None:
    """What is wrong with an answer's status and body, or None: a 500, an error that is not coded (in the
    OpenAI protocol's shape, `{"message", "type", "param", "code"}`, under `/openai/v1`)."""
    if status >= 500 and status != 503:
        return f"{where}: a server error ({text[:200]})"
    if status < 400:
        return None
    try:
        error = json.loads(text)["error"]
    except (ValueError, KeyError, TypeError):
        return f"{where}: the error body is not {{'error': ...}} ({text[:200]})"
    codes = PROTOCOL_CODES if protocol else CODES
    if not (isinstance(error, dict) and error.get("code") in codes and isinstance(error.get("message"), str)):
        return f"{where}: the error is not coded ({text[:200]})"
    if protocol and not (isinstance(error.get("type"), str) and "param" in error):
        return f"{where}: the error is not in the protocol's shape ({text[:200]})"
    return None


Round = dict[str, dict[str, Any]]
"""Values a round of the fuzz fixes (by location: `path_parameters`, `query`), the rest generated."""


def fuzz(spec: dict[str, Any], base_url: str, rounds: list[Round]) -> list[str]:
    """Per round, send `EXAMPLES` generated requests per route and mode; return what was wrong (blocking)."""
    schema = schemathesis.openapi.from_dict(spec)
    session, deadline = requests.Session(), time.monotonic() + BUDGET_S
    found: list[str] = []
    for fixed in rounds:
        for result in schema.get_all_operations():
            operation = result.ok()  # type: ignore[union-attr]  # a schema FastAPI made is valid
            names = {p.name for p in operation.path_parameters}
            path = {k: v for k, v in fixed.get("path_parameters", {}).items() if k in names}
            query = {**fixed.get("query", {}), **QUICK.get(operation.path, {})}
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                strategy = operation.as_strategy(
                    generation_mode=mode, path_parameters=path or None, query=query or None
                )
                examples = SCHEDULE_EXAMPLES if "/schedules" in operation.path else EXAMPLES
                if time.monotonic() > deadline:
                    return [*found, f"the fuzz did not finish within {BUDGET_S:.0f} s"]
                found += _examples(strategy, base_url, session, examples, deadline)
    return found


def _examples(strategy: Any, base_url: str, session: requests.Session, examples: int, deadline: float) -> list[str]:
    found: list[str] = []

    @given(case=strategy)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def check(case: schemathesis.Case[Any]) -> None:
        if time.monotonic() > deadline:
            return  # `fuzz` reports it unfinished
        response = case.call(base_url=base_url, session=session, timeout=60)
        problem = problem_of(case, response)
        if problem is not None:
            found.append(problem)

    with contextlib.suppress(Unsatisfiable):  # nothing to make invalid (a route without parameters or body)
        check()
    return found


@pytest.mark.slow
@pytest.mark.timeout(420)
async def test_every_answer_is_documented_and_coded(tl: Threadline, worker: Worker, cid: str) -> None:
    """Generated requests, valid and not, to every route: no 500, every status documented for its
    route, every error a coded body."""
    async with serving(create_app(tl)) as http:
        spec = (await http.get("/openapi.json")).json()
        chat = tl.conversation("tutor", id=cid)
        first = await chat.predict("a turn to aim at")
        ids = {"conversation_id": cid, "turn": first.id, "response_id": f"{first.id}~{cid}"}
        real: Round = {"path_parameters": ids, "query": {"store": "default"}}
        try:
            found = await asyncio.to_thread(fuzz, spec, str(http.base_url).rstrip("/"), [{}, real, real])
        finally:
            await delete_schedules(tl)

    assert [] == sorted(set(found))


async def delete_schedules(tl: Threadline) -> None:
    """Delete every schedule the fuzz made (of generated conversations too): a schedule of a second would
    otherwise start a firing every second, for a worker that has stopped, for the rest of the session."""
    client = await tl.temporal()
    async for entry in await client.list_schedules():
        await client.get_schedule_handle(entry.id).delete()


HOSTILE: list[Any] = ["\ud800", "a\u0000b", float("nan"), float("inf"), 10**400]
"""A lone surrogate, a NUL, NaN, Infinity and a 401-digit number: JSON can carry each of them."""
BASES: dict[str, Any] = {
    "/v1/conversations": {"program": "tutor"},
    "/v1/conversations/{conversation_id}/turns": {"message": "hi"},
    "/v1/conversations/{conversation_id}/head": {"turn": "TURN"},
    "/v1/conversations/{conversation_id}/records": {"records": [{"kind": "note"}]},
    "/v1/conversations/{conversation_id}/merges": {"turns": ["TURN"], "with": "tutor"},
    "/v1/conversations/{conversation_id}/turns/{turn}/ratings": {"verdict": "right"},
    "/v1/conversations/{conversation_id}/messages": {"message": "hi"},
    "/v1/conversations/{conversation_id}/flows": {"flow_name": "order"},
    "/v1/conversations/{conversation_id}/transcript": {"messages": [{"role": "user", "content": "hi"}]},
    "/v1/conversations/{conversation_id}/turns/{turn}/resume": {"results": {}},
    "/v1/conversations/{conversation_id}/turns/{turn}/approvals": {"verdict": "yes"},
    "/v1/conversations/{conversation_id}/schedules": {"message": "hi", "cron": "0 0 1 1 *"},
    "/v1/conversations/{conversation_id}/turns/{turn}/ask-again": {"lm": "offline"},
    "/v1/codec/decode": {"payloads": [{"metadata": {"encoding": "anNvbi9wbGFpbg=="}, "data": "IkhpIg=="}]},
    "/v1/codec/encode": {"payloads": [{"metadata": {"encoding": "anNvbi9wbGFpbg=="}, "data": "IkhpIg=="}]},
    "/openai/v1/conversations": {"metadata": {"k": "v"}},
    "/openai/v1/conversations/{conversation_id}": {"metadata": {"k": "v"}},
    "/openai/v1/conversations/{conversation_id}/items": {"items": [{"role": "user", "content": "hi"}]},
    "/openai/v1/responses": {"input": "hi", "conversation": "CONVERSATION"},
}
"""A valid body for each route that takes one (`TURN`: a turn of the conversation); each field in turn
is then made hostile. A route that takes a body and is missing here fails the test: add its body."""


def fields(
    spec: dict[str, Any], schema: dict[str, Any], path: tuple[str | int, ...] = (), seen: frozenset[str] = frozenset()
) -> list[tuple[Any, ...]]:
    """The paths of every string and number field of `schema` (objects and arrays walked, refs followed,
    each once on a path: an escalation's rule holds a rule)."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        return [] if name in seen else fields(spec, spec["components"]["schemas"][name], path, seen | {name})
    if "anyOf" in schema:
        return [found for option in schema["anyOf"] for found in fields(spec, option, path, seen)]
    if schema.get("type") == "object":
        properties = schema.get("properties", {}).items()
        named = [f for name, sub in properties for f in fields(spec, sub, (*path, name), seen)]
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            return named + fields(spec, extra, (*path, "extra"), seen)
        return named + ([(*path, "extra")] if extra is True else [])
    if schema.get("type") == "array":
        return fields(spec, schema.get("items", {}), (*path, 0), seen)
    if "enum" in schema or schema.get("type") in ("boolean", "null"):
        return []
    return [path]  # a string, a number, or any JSON value


def hostile_body(base: Any, path: tuple[Any, ...], value: Any) -> Any:
    """`base` with the field at `path` set to `value` (the objects and lists on the way made as needed)."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(head, int):
        items = list(base) if isinstance(base, list) and base else [{}]
        return [hostile_body(items[0], rest, value)]
    within = dict(base) if isinstance(base, dict) else {}
    within[head] = hostile_body(within.get(head, {}), rest, value)
    return within


@pytest.mark.slow
async def test_hostile_values_in_every_body_field_are_answered_with_a_code(
    tl: Threadline, worker: Worker, cid: str
) -> None:
    """Each string and number field of each request body, in turn, holds a lone surrogate, a NUL, NaN,
    Infinity or a 401-digit number: every answer is a documented status with a coded body, no 500."""
    found = []
    async with serving(create_app(tl)) as http:
        turn = (await tl.conversation("tutor", id=cid).predict("a turn to aim at")).id
        spec = (await http.get("/openapi.json")).json()
        routes = [(path, op) for path, ops in spec["paths"].items() for method, op in ops.items() if method == "post"]
        taking = {
            route: op["requestBody"]["content"]["application/json"]["schema"]
            for route, op in routes
            if "requestBody" in op
        }
        assert set() == set(taking) - set(BASES)
        for route, schema in taking.items():
            url = route.replace("{conversation_id}", cid).replace("{turn}", turn)
            url = url.replace("{response_id}", f"{turn}~{cid}")
            for path in fields(spec, schema):
                for value in HOSTILE:
                    body = json.dumps(hostile_body(BASES[route], path, value)).replace("TURN", turn)
                    body = body.replace("CONVERSATION", cid)
                    answer = await http.post(url, content=body, headers={"content-type": "application/json"})
                    where = f"POST {route} {'.'.join(map(str, path))}={body[-40:]!r} -> {answer.status_code}"
                    protocol = is_protocol(route)
                    found.append(coding_problem(where, answer.status_code, answer.text, protocol=protocol))
        await delete_schedules(tl)
    assert [] == [problem for problem in found if problem is not None]


async def test_a_model_the_worker_cannot_ask_is_the_callers_error(tl: Threadline, worker: Worker, cid: str) -> None:
    """A message naming a model whose provider the worker lacks answers 422 `provider-unconfigured`
    (the fuzz found it answering 500)."""
    await tl.conversation("tutor", id=cid).predict("a first turn")
    async with serving(create_app(tl)) as http:
        answer = await http.post(f"/v1/conversations/{cid}/messages", json={"message": "hi", "lm": "nowhere:model"})

    assert (422, "provider-unconfigured") == (answer.status_code, answer.json()["error"]["code"])
