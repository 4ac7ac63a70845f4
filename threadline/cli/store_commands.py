"""`threadline store`: migrate PostgreSQL stores, copy conversations between stores, check a store.

    threadline store migrate                       # every PostgreSQL store THREADLINE_STORES names
    threadline store copy default postgresql://db/threadline          # a folder store into PostgreSQL
    threadline store copy main /srv/backup --conversation alex        # one conversation back to a folder
    threadline store check main                    # every record a JSON object whose seq is its position

A store is named as THREADLINE_STORES names it, or given as a folder path or a `postgresql://` URL.
Copies are byte for byte and fill empty conversations only (store/backends/transfer.py).
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any

from . import output
from .common import Subcommands, env_settings
from .output import Output

if TYPE_CHECKING:
    from core.settings import Settings, StoreSpec
    from store.backends.folder import FolderStore
    from store.backends.postgres import PostgresStore
    from store.backends.transfer import StoreReport

_DESCRIPTION = "Migrate PostgreSQL stores, copy conversations between stores, check a store."
_STORE_HELP = "a store's name (THREADLINE_STORES), a folder path, or a postgresql:// URL"


def add_commands(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    """Add `store` and its subcommands."""
    store = commands.add_parser(
        "store", parents=[common], help="migrate, copy and check stores", description=_DESCRIPTION
    )
    actions = store.add_subparsers(dest="action", required=True, metavar="ACTION")

    migrate = actions.add_parser("migrate", parents=[common], help="bring PostgreSQL stores to this schema version")
    migrate.add_argument("names", metavar="NAME", nargs="*", help="the stores (default: every one named)")
    migrate.set_defaults(run=run_migrate)

    copy = actions.add_parser(
        "copy",
        parents=[common],
        help="copy conversations byte for byte between stores",
        description="Copy every conversation of SRC (or one) into DST, byte for byte. Conversations that "
        "already hold records in DST are refused (store-conflict) before anything is written.",
    )
    copy.add_argument("source", metavar="SRC", help=_STORE_HELP)
    copy.add_argument("destination", metavar="DST", help=_STORE_HELP)
    copy.add_argument("--conversation", metavar="ID", help="copy only this conversation")
    copy.set_defaults(run=run_copy)

    check = actions.add_parser(
        "check", parents=[common], help="check every record of a store", description="Exit 1 when a problem is found."
    )
    check.add_argument("name", metavar="NAME", help=_STORE_HELP)
    check.set_defaults(run=run_check)


def resolve(settings: Settings, given: str) -> StoreSpec:
    """A store's name (as the settings name it), else a URL or a folder path as given."""
    from core.settings import is_database_url, store_spec

    if given in settings.named_stores() and not is_database_url(given):
        return settings.store_spec(given)
    return store_spec(given)


def shown(spec: StoreSpec) -> str:
    """Where a store is, for printing: a folder's path, or a URL without its password."""
    from core.settings import is_database_url

    if not is_database_url(spec):
        return str(spec)
    scheme, _, rest = str(spec).partition("://")
    user, at, host = rest.rpartition("@")
    return f"{scheme}://{user.split(':')[0]}@{host}" if at else f"{scheme}://{rest}"


async def run_migrate(args: argparse.Namespace, out: Output) -> int:
    """Migrate the PostgreSQL stores named (or all); print each one's schema version."""
    from store.backends.opening import migrate_stores

    settings = env_settings()
    specs = {name: settings.store_spec(name) for name in args.names or settings.named_stores()}
    versions = await migrate_stores(specs)
    rows = [
        (name, f"schema version {versions[name]}" if name in versions else "a folder: nothing to do") for name in specs
    ]
    data = {"stores": {name: versions.get(name) for name in specs}}
    out.emit(data, output.fields(rows))
    return 0


async def run_copy(args: argparse.Namespace, out: Output) -> int:
    """Copy conversations from SRC into DST; print how many records each took."""
    settings = env_settings()
    source, destination = resolve(settings, args.source), resolve(settings, args.destination)
    copied = await asyncio.to_thread(_copy, source, destination, args.conversation)
    records = sum(copied.values())
    data: dict[str, Any] = {"from": shown(source), "to": shown(destination), "copied": copied}
    text = f"Copied {len(copied)} conversation(s), {records} record(s), from {shown(source)} to {shown(destination)}."
    out.emit(data, text)
    return 0


def _copy(source: StoreSpec, destination: StoreSpec, conversation: str | None) -> dict[str, int]:
    from store.backends.transfer import copy_conversations

    with ExitStack() as stack:
        src, dst = (stack.enter_context(_opened(spec)) for spec in (source, destination))
        return copy_conversations(src, dst, conversation)


async def run_check(args: argparse.Namespace, out: Output) -> int:
    """Check every record of a store; print what was found (exit 1 on a problem)."""
    spec = resolve(env_settings(), args.name)
    report = await asyncio.to_thread(_check, spec)
    data = {"store": shown(spec), "ok": report.ok, "conversations": report.conversations, "records": report.records}
    lines = [f"{report.conversations} conversation(s), {report.records} record(s): " + ("ok" if report.ok else "")]
    for conversation, problems in report.problems.items():
        lines += [f"{conversation}: {problem}" for problem in problems]
    if not report.ok:
        lines[0] += f"problems in {len(report.problems)} conversation(s)"
    out.emit({**data, "problems": report.problems}, "\n".join(lines))
    return 0 if report.ok else 1


def _check(spec: StoreSpec) -> StoreReport:
    from store.backends.transfer import check_store

    with _opened(spec) as store:
        return check_store(store)


@contextmanager
def _opened(spec: StoreSpec) -> Iterator[FolderStore | PostgresStore]:
    """The store at `spec` for a `with` block, its connections closed after it."""
    from store.backends.opening import open_sync
    from store.backends.postgres import PostgresStore

    store = open_sync(spec)
    try:
        yield store
    finally:
        if isinstance(store, PostgresStore):
            store.close()
