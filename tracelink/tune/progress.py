"""The progress display of `tune`'s long work: a rich bar with an ETA, as a callback of the loop
(:mod:`tracelink.tune.tuners.loop`). Opened with ``with``, it shows one line for the loop it is given to
(trials, or races, against the budget's trials or ``total``) and one for the step within a batch that
the measuring code reports through :meth:`ProgressBar.report` (compiling candidates, timing them, the
rounds of a race); the work outside a loop (the checks inside the whole program) reports steps too."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from tracelink.tune.tuners.loop import Budget, Callback


class ProgressBar(Callback):
    """``title``'s bar (``total`` units when the budget has no trial limit; None: no total), shown while
    a loop runs, and the current step's; transient: nothing is left on the terminal when it closes."""

    def __init__(self, console: Console, title: str = "", total: int | None = None):
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                 TextColumn("ETA"), TimeRemainingColumn(), console=console, transient=True)
        self.title, self.total = title, total
        self.main: TaskID | None = None
        self.step: TaskID | None = None
        self.line: TaskID | None = None  # a status line (the Ray cluster's builds and races)
        self.what = ""

    def __enter__(self) -> ProgressBar:
        self.progress.start()
        return self

    def __exit__(self, *exception: object) -> None:
        self.progress.stop()

    def begin(self, budget: Budget, spent: int) -> None:
        total = budget.trials if budget.trials is not None else self.total
        self.main = self.progress.add_task(self.title, total=total, completed=spent)

    def report(self, what: str, done: int, total: int) -> None:
        """``done`` of ``total`` units of the step ``what`` (another step starts afresh: its own ETA)."""
        if self.step is not None and self.what != what:
            self.done()
        if self.step is None:
            self.step, self.what = self.progress.add_task(what, total=total, completed=done), what
        else:
            self.progress.update(self.step, total=total, completed=done)

    def status(self, text: str) -> None:
        """Show ``text`` on the status line (under the bars until the display closes)."""
        if self.line is None:
            self.line = self.progress.add_task(text, total=None)
        self.progress.update(self.line, description=text)

    def measured(self, batch: list, results: list) -> None:
        self.progress.advance(self.main, len(results))
        self.done()

    def done(self) -> None:
        """The current step is over: its line goes."""
        if self.step is not None:
            self.progress.remove_task(self.step)
            self.step = None

    def end(self, stop: str) -> None:
        self.done()
        if self.main is not None:
            self.progress.remove_task(self.main)
            self.main = None
