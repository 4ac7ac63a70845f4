"""A shop's tools and programs that call them, as a worker loads them from THREADLINE_PROGRAMS.

Every tool run is counted: in `RUNS` in this process, and one line in the file that
`THREADLINE_TEST_TOOL_RUNS` names (a worker run as a subprocess counts there, for the test to read).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import threadline

RUNS: list[str] = []
REFUNDS: dict[str, int] = {}


def _ran(name: str) -> None:
    RUNS.append(name)
    where = os.environ.get("THREADLINE_TEST_TOOL_RUNS")
    if where:
        with Path(where).open("a", encoding="utf-8") as f:
            f.write(name + "\n")


def runs_in(path: Path) -> list[str]:
    """The tool runs a subprocess worker counted in `path`."""
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


@threadline.tool(effects="reads")
def order_status(order: str) -> str:
    """Where an order is."""
    _ran("order_status")
    return f"order {order} is in Leeds"


@threadline.tool(effects="changes")
def refund(order: str, amount: int) -> str:
    """Refund part of an order."""
    _ran("refund")
    REFUNDS[order] = REFUNDS.get(order, 0) + amount
    return f"refunded {amount} on order {order}"


@threadline.program(tools=[order_status, refund])
def shop(request: str) -> str:
    """Help the customer with their order."""
    raise NotImplementedError  # a model answers


@threadline.program(tools=[order_status, refund], approve="changes")
def careful_shop(request: str) -> str:
    """Help the customer with their order; refunds need a person's yes."""
    raise NotImplementedError  # a model answers


@threadline.program(tools=[order_status, refund], approve={"within": 60, "then": "approve"})
def hurried_shop(request: str) -> str:
    """Help the customer with their order; a refund nobody answers within a minute goes ahead."""
    raise NotImplementedError  # a model answers


@threadline.tool(effects="reads", timeout=0.5, attempts=1)
def slow_status(order: str) -> str:
    """Where an order is, from a system that does not answer in time."""
    _ran("slow_status")
    time.sleep(3)
    return "too late"


@threadline.program(tools=[slow_status])
def slow_shop(request: str) -> str:
    """Help the customer with their order."""
    raise NotImplementedError  # a model answers


@threadline.ai(tools=[order_status, refund], approve={"within": 60, "then": "approve"})
def hurried_clerk(request: str) -> str:
    """Help the customer with their order; a refund nobody answers within a minute goes ahead."""
    raise NotImplementedError  # a model answers


@threadline.program
def hurried_desk(request: str) -> str:
    """A desk whose clerk (a helper) asks about refunds under its own deadline."""
    return hurried_clerk(request)
