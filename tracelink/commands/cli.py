"""The `tracelink` command line: one subcommand per user-facing stage.

Each module in COMMANDS defines ``register(subparsers)``, which adds its subparser(s) and sets
``handler`` (a function of the parsed arguments returning the exit code).
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import os
import signal
import sys

from tracelink.version import __version__
from tracelink.errors import TracelinkError

# command -> (module defining ``register``, one line for the command list). Only the module of the
# command being run is imported, so each command starts without loading the others' dependencies.
COMMANDS: dict[str, tuple[str, str]] = {
    "profile": ("tracelink.commands.profile", "compile, run and profile a program; map time to source lines"),
    "report": ("tracelink.commands.report", "rebuild the HTML report and trace.json of a profile directory"),
    "ingest": ("tracelink.commands.ingest", "fold a Tracy capture into a profile directory, or decode it"),
    "hook": ("tracelink.commands.hook", "run a command under the perf hook and print its statistics"),
    "tune": ("tracelink.commands.tune", "search IREE's lowering strategies, then tile configs of the hottest dispatches"),
    "diff": ("tracelink.commands.diff", "compare two profiles source op by source op; gate regressions for CI"),
    "repro": ("tracelink.commands.repro", "write a standalone reproducer of one dispatch call site"),
}


def build_parser(command: str | None) -> argparse.ArgumentParser:
    """The parser, with the full arguments of ``command`` and a one-line entry for every other command."""
    parser = argparse.ArgumentParser(
        prog="tracelink",
        description="Traceability-first profiler for IREE: which line of your program is this dispatch?",
    )
    parser.add_argument("--version", action="version", version=f"tracelink {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    if command in COMMANDS:
        importlib.import_module(COMMANDS[command][0]).register(subparsers)
    for name, (_, summary) in COMMANDS.items():
        if name not in subparsers.choices:
            subparsers.add_parser(name, help=summary)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP (the terminal closed), raised like Ctrl-C so every stage stops the same way."""

    def __init__(self, signal_number: int = signal.SIGTERM) -> None:
        super().__init__(signal_number)
        self.signal_number = signal_number


# Every stopping signal received. Its exception can be lost: raised while an extension runs Python code,
# it may be swallowed there (about 1 SIGTERM in 100 sent while tracelink loads its libraries, and the
# profile then ran to its end and exited 0); the record still makes tracelink end as interrupted.
received: list[int] = []


def terminate(signal_number: int, frame: object) -> None:
    received.append(signal_number)
    raise Terminated(signal_number)


def interrupt(signal_number: int, frame: object) -> None:
    received.append(signal_number)
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = next((word for word in argv if not word.startswith("-")), None)
    args = build_parser(command).parse_args(argv)
    undecodable = next((word for word in argv[: argv.index("--") if "--" in argv else len(argv)] if not is_utf8(word)), None)
    if undecodable is not None:  # file names are written into logs, JSON and the report as UTF-8 text
        print_error(f"tracelink: error: {undecodable}: not valid UTF-8; rename it (tracelink records every path it is given as text)")
        return 2
    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGHUP, terminate)  # its default ends Python at once, leaving the tools running
    signal.signal(signal.SIGINT, interrupt)  # also when started in the background, which ignores it
    try:
        status = int(args.handler(args))
    except TracelinkError as error:
        print_error(f"tracelink: error: {error}")
        return 1
    except OSError as error:  # an unwritable or full disk, wherever tracelink was writing
        where = f"{error.filename}: " if error.filename else ""
        print_error(f"tracelink: error: {where}{error.strerror or error}")
        return 1
    except UnicodeError as error:  # a name read from the disk (not the command line) that is not UTF-8
        print_error(f"tracelink: error: a name that is not valid UTF-8 ({error}); rename the file")
        return 1
    except KeyboardInterrupt as stopped:
        return interrupted(stopped.signal_number if isinstance(stopped, Terminated) else signal.SIGINT)
    return interrupted(received[0]) if received else status


def interrupted(number: int) -> int:
    """Stop every tool, say so, and the exit status of being stopped by signal ``number``."""
    # Tools run in their own sessions: a Ctrl-C or SIGTERM reaches tracelink only, so kill them here.
    from tracelink.tools import stop_all_tools  # not at the top: it loads the compiler package

    stop_all_tools()
    print_error(f"tracelink: interrupted ({signal.Signals(number).name}); every tool it started is stopped; files written so far are kept")
    return 128 + number


def is_utf8(word: str) -> bool:
    """Whether a command-line word was valid UTF-8 (Python keeps other bytes as lone surrogates)."""
    try:
        word.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def print_error(text: str) -> None:
    """One line on stderr, bold red on a terminal; the text is never read as markup (program names are)."""
    # rich is loaded here and by the commands' consoles, not at start-up: `profile` starts the compiler first
    from rich.text import Text

    from tracelink.textsafe import TerminalConsole

    TerminalConsole(stderr=True, highlight=False).print(Text(text, style="bold red"), soft_wrap=True)


def command() -> None:
    """The ``tracelink`` command: :func:`main`, then exit with its status, at once: with the output
    flushed (and, unless interrupted, the exit handlers run), not through the interpreter's shutdown.

    The shutdown frees every object one at a time, with everything already written. After an interrupt
    the exit handlers are skipped too: with the interrupt message printed, tracelink sometimes still
    ended as killed by SIGINT (exit -2, not 130), which exiting this way prevents; CPython's exit kills
    the process with SIGINT when it recorded an unhandled KeyboardInterrupt, which we think an
    extension's evaluation of Python code did. Nothing is left for the shutdown to do then: the tools
    are stopped (the guard removes their temporary directory), files closed. What both cost is in
    docs/reference/numbers.md (measurements behind the code)."""
    status = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):  # a reader that went away, or a stream already closed
            pass
    if status <= 128:  # not interrupted
        if sys.getprofile() is not None or sys.gettrace() is not None:
            sys.exit(status)  # a profiler or coverage of tracelink itself writes its results after this returns
        atexit._run_exitfuncs()
    os._exit(status)


if __name__ == "__main__":
    command()
