"""The `tracelink` command line: one subcommand per user-facing stage.

Each module in COMMAND_MODULES defines ``register(subparsers)``, which adds its subparser and
sets ``handler`` (a function of the parsed arguments returning the exit code).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from rich.console import Console

from tracelink import TracelinkError, __version__

COMMAND_MODULES: tuple[str, ...] = (
    "tracelink.pipeline",
    "tracelink.report.command",
    "tracelink.collect.hook_command",
    "tracelink.collect.tracy.command",
    "tracelink.tune.command",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tracelink",
        description="Traceability-first profiler for IREE: which line of your program is this dispatch?",
    )
    parser.add_argument("--version", action="version", version=f"tracelink {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except TracelinkError as error:
        Console(stderr=True, highlight=False).print(f"[bold red]tracelink: error:[/] {error}", soft_wrap=True)
        return 1
    except KeyboardInterrupt:
        Console(stderr=True).print("tracelink: interrupted; artifacts written so far are kept")
        return 130


if __name__ == "__main__":
    sys.exit(main())
