"""`threadline chat`: a conversation one line at a time, from a terminal or a pipe.

Each line is sent as a turn and its answer is printed as the model writes it; lines starting with
`/` are commands (`/help`). With `--json`, every event is one JSON object on stdout:
`{"event": "text" | "asked-again" | "placed" | "turn" | "error" | <command>, ...}`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING

from core.errors import ErrorCode, ThreadlineError, is_code

from . import asking, chat_flows, output
from .common import (
    Chat,
    InputLines,
    Progress,
    Subcommands,
    add_conversation,
    branch_tree,
    env_settings,
    message_inputs,
    note,
    open_conversation,
)
from .output import Output

if TYPE_CHECKING:
    from core.settings import Settings
    from threadline.acting import LiveTurn
    from threadline.reading import Turn

HELP = f"""\
/turns         the turns from the first to the head of this branch
/all           every turn of every branch
/show          the branch tree, the head marked *
/from TURN     the next message continues after TURN (a branch)
/head TURN     move the conversation's head to TURN
/stop [TURN]   stop TURN, or every running and queued turn
/history       the summary, key facts and turn counts the model is given
{chat_flows.HELP}
/help          this list
/quit          end the chat (so does Ctrl-D)
When a turn waits for a person, the chat asks: answer y (yes), or n and a reason (no).
A TURN may be a full id or a short one as /show prints it. A line starting `//` sends the
rest with one `/`. Ctrl-C stops the turn being answered; at the prompt it ends the chat."""


def add_command(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    """Add `chat`."""
    chat = commands.add_parser(
        "chat",
        parents=[common],
        help="hold a conversation, one line a turn",
        description="Send each line of standard input as a turn to conversation ID (started if new) and\n"
        "print the answer as it arrives. Lines starting with / are commands (below).",
        epilog=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_conversation(chat, program=True)
    chat.add_argument("--lm", metavar="MODEL", help="the model for its turns (default THREADLINE_MODEL)")
    chat.set_defaults(run=run_chat)


async def run_chat(args: argparse.Namespace, out: Output) -> int:
    """Hold the conversation until `/quit` or the end of the input (exit 0), or Ctrl-C at the prompt (130)."""
    settings = env_settings()
    chat = ChatSession(await open_conversation(args, settings), out, settings=settings, lm=args.lm)
    lines = InputLines(sys.stdin)
    if lines.interactive:
        note(f"Conversation {chat.chat.id} ({args.program}). /help lists commands; Ctrl-D ends.\n")
    with chat.interrupts() as interrupted, chat_flows.following(chat):
        try:
            while (line := await lines.get()) is not None and await chat.handle(line):
                pass
        except asyncio.CancelledError:
            if not interrupted.is_set():
                raise
            if lines.interactive:
                note("\n")  # after the `^C` the terminal echoed: the shell's prompt on a line of its own
            return 130
    return 0


class ChatSession:
    """One chat: sends lines as turns and carries out commands, printing through `out`."""

    def __init__(self, chat: Chat, out: Output, *, settings: Settings, lm: str | None) -> None:
        self.chat = chat
        self.out = out
        self.settings = settings
        self.lm = lm
        self.running: str | None = None
        """The turn being answered, which Ctrl-C stops."""
        self.asking: LiveTurn | None = None
        """A turn waiting for the person at the keyboard: the next line answers it."""
        self._stopping: tuple[str, asyncio.Task[None]] | None = None
        """The turn Ctrl-C asked to stop, and the task asking (held: the loop keeps only weak references)."""
        self._commands: dict[str, Callable[[str], Awaitable[None]]] = {
            "/turns": self._turns,
            "/all": lambda arg: self._turns(arg, all=True),
            "/show": self._show,
            "/from": self._from,
            "/head": self._head,
            "/stop": self._stop,
            "/history": self._history,
            "/flow": lambda arg: chat_flows.flow_command(self, arg),
            "/help": self._help,
        }

    async def handle(self, line: str) -> bool:
        """Carry out one line: a command or a message. Return False when the chat should end."""
        from threadline.crossing import SDK_ERROR, error_of

        text = line.strip()
        name, _, arg = text.partition(" ")
        if name in {"/quit", "/exit"}:
            return False
        try:
            if self.asking is not None and text and not name.startswith("/"):
                await self._answer(self.asking, text)
            elif name.startswith("/") and not name.startswith("//"):
                await self._command(name, arg.strip())
            elif text:
                await self.send(text[1:] if name.startswith("//") else text)
        except ThreadlineError as err:
            self.error(err)
        except SDK_ERROR as err:  # a call that missed `crossing` (none should): still a coded error
            self.error(error_of(err))
        return True

    async def send(self, message: str) -> None:
        """Send `message` as a turn, print its text as it arrives, then how it ended."""
        inputs = message_inputs(message, self.chat.config.program, self.settings)
        placed = await self.chat.send(lm=self.lm, **inputs)
        if self.out.json:
            self.out.emit({"event": "placed", "turn": placed.id, "parent": placed.parent}, "")
        await self._follow(placed.id, placed.result, placed.request_id)

    async def _follow(self, turn_id: str | None, ended: Callable[[], Awaitable[Turn]], request_id: str) -> None:
        """Print the turn's text as it arrives, then how it ended; ask when it waits for a person."""
        from threadline.acting import LiveTurn

        async with Progress.on_stderr() as progress:
            progress.turn = self.running = turn_id
            try:
                streamed = await self._stream(turn_id, progress) if turn_id else ""
                turn = await ended()
            finally:
                self.running = None
        self.asking = turn if isinstance(turn, LiveTurn) and turn.state == "waiting" else None
        if self.asking is not None:
            self.out.emit({"event": "waiting", **turn.as_dict()}, asking.question(turn))
            return
        self._ended(turn, streamed)
        if (turn.model or "").startswith("flow:"):  # a guided flow's turn: print what it collected once done
            await chat_flows.print_collected(self, request_id)

    async def _answer(self, turn: LiveTurn, line: str) -> None:
        """The person answered the waiting turn: yes or no (with a reason); then follow it again."""
        yes, reason = asking.answer_of(line)
        answered = await (turn.approve(wait=False) if yes else turn.deny(reason=reason, wait=False))
        self.asking = None

        async def ended() -> Turn:
            if answered.request_id:
                await self.chat.outcome(answered.request_id)
            return await self.chat.turn(turn.id)

        await self._follow(turn.id, ended, answered.request_id or "")

    async def _stream(self, turn: str, progress: Progress) -> str:
        """Print the turn's text as it arrives; return the last text printed (empty: none)."""
        stream = self.out.stream or sys.stdout
        last = ""
        async for piece in self.chat.watch(turn):
            progress.quiet()
            if self.out.json:
                event = {"event": "text", "text": piece.text} if piece.text is not None else {"event": "asked-again"}
                self.out.emit(event, "")
                continue
            if piece.text is None:  # the model was asked again: what follows replaces the text so far
                stream.write("\n[asked again]\n" if last else "")
            else:
                stream.write(piece.text)
            last = piece.text or last
            stream.flush()
        return last

    def _ended(self, turn: Turn, streamed: str) -> None:
        """Print how the turn ended: its answer unless it was streamed, its error, then a blank line."""
        if self.out.json:
            self.out.emit({"event": "turn", **turn.as_dict()}, "")
        elif turn.state == "done" and not streamed:
            self._print(output.result_text(turn) + "\n")
        elif streamed and not streamed.endswith("\n"):
            self._print("\n")
        if turn.state != "done":
            self.error(_turn_error(turn))
        if not self.out.json:
            self._print("\n")

    def _print(self, text: str) -> None:
        stream = self.out.stream or sys.stdout
        stream.write(text)
        stream.flush()

    def error(self, err: ThreadlineError) -> None:
        """Print `err` (`error: <code>: <message>` on stderr; with `--json`, an `error` event)."""
        if self.out.json:
            self.out.emit({"event": "error", "error": err.to_dict()}, "")
        else:
            self.out.error(err)

    @contextlib.contextmanager
    def interrupts(self) -> Iterator[asyncio.Event]:
        """While the chat runs, Ctrl-C stops the turn being answered; otherwise it ends the chat.

        Yields the event set when Ctrl-C ended it (the chat's task is then cancelled).
        """
        loop, task, interrupted = asyncio.get_running_loop(), asyncio.current_task(), asyncio.Event()

        def on_interrupt() -> None:
            if self.running is not None and (self._stopping is None or self._stopping[0] != self.running):
                note(f"\n[stopping turn {self.running}; Ctrl-C again ends the chat]\n")
                self._stopping = (self.running, asyncio.create_task(self._stop_quietly(self.running)))
                return
            interrupted.set()
            if task is not None:
                task.cancel()

        with contextlib.suppress(NotImplementedError, RuntimeError):  # none here (Windows, or not the main thread)
            loop.add_signal_handler(signal.SIGINT, on_interrupt)
        try:
            yield interrupted
        finally:
            with contextlib.suppress(NotImplementedError):
                loop.remove_signal_handler(signal.SIGINT)

    async def _stop_quietly(self, turn: str) -> None:
        try:
            await self.chat.stop(turn)
        except ThreadlineError as err:
            self.error(err)

    # ----- commands

    async def _command(self, name: str, arg: str) -> None:
        command = self._commands.get(name)
        if command is None:
            raise ThreadlineError(ErrorCode.INVALID_REQUEST, f"{name} is not a command; /help lists them")
        await command(arg)
        if not self.out.json:
            self._print("\n")  # a blank line, as after an answer

    async def _turns(self, arg: str, *, all: bool = False) -> None:
        turns = await self.chat.turns(all=all)
        text = output.turns_table(turns, self.out) if turns else "No turns yet."
        self.out.emit({"event": "turns", "all": all, "turns": [t.as_dict() for t in turns]}, text)

    async def _show(self, arg: str) -> None:
        data = await branch_tree(self.chat)
        text = output.tree_text(data["turns"], data["head"], self.out) or "No turns yet."
        with output.nesting(output.tree_depth(data["turns"])):
            self.out.emit({"event": "show", **data}, text)

    async def _from(self, arg: str) -> None:
        turn = await self._resolve(arg, "/from")
        self.chat = self.chat.continue_from(turn)
        self.out.emit({"event": "from", "turn": turn}, f"The next message continues after {turn}.")

    async def _head(self, arg: str) -> None:
        turn = await self._resolve(arg, "/head")
        await self.chat.head(turn)
        self.out.emit({"event": "head", "turn": turn}, f"Head: {turn}")

    async def _stop(self, arg: str) -> None:
        turn = await self._resolve(arg, "/stop") if arg else None
        await self.chat.stop(turn)
        what = f"turn {turn}" if turn else "every running and queued turn"
        self.out.emit({"event": "stop", "turn": turn}, f"Asked to stop {what}.")

    async def _history(self, arg: str) -> None:
        data = await self.chat.history()
        self.out.emit({"event": "history", **data}, output.history_text(data))

    async def _help(self, arg: str) -> None:
        self.out.emit({"event": "help", "text": HELP}, HELP)

    async def _resolve(self, given: str, command: str) -> str:
        """The full id of turn `given`: a full id, or a short one (`0193a1b2…7c4e`, a prefix) only one has."""
        if not given:
            raise ThreadlineError(ErrorCode.INVALID_REQUEST, f"{command} takes a turn id; /turns and /show list them")
        ids = [t.id for t in await self.chat.turns(all=True)]
        if given in ids:
            return given
        start, _, end = given.replace("...", "…").partition("…")
        found = [tid for tid in ids if tid.startswith(start) and tid.endswith(end)]
        if len(found) != 1:
            what = f"{len(found)} turns" if found else "no turn"
            raise ThreadlineError(ErrorCode.TURN_UNKNOWN, f"{given} matches {what} of {self.chat.id}; give the full id")
        return found[0]


def _turn_error(turn: Turn) -> ThreadlineError:
    """How a turn that did not end `done` is reported: its own code when it has one, else `turn-state`."""
    error = turn.error or {}
    code = error.get("code")
    why = f": {error['message']}" if error.get("message") else ""
    return ThreadlineError(
        ErrorCode.parse(code) if is_code(code) else ErrorCode.TURN_STATE, f"turn {turn.id} ended {turn.state}{why}"
    )
