"""Split the trial budget across the tuned dispatches by expected end-to-end gain (Ansor's task scheduler).

Trials are spent in rounds of one batch. Every task (dispatch) first gets one round (warm-up); after
that each round goes to the task whose next trials are expected to lower the program's time most:

    score = share × (alpha × recent rate + (1 − alpha) × 1 / trials)

``share`` is the task's share of the timed run, so a relative gain of the dispatch is worth ``share``
of that gain end to end (Ansor's chain rule through the weighted sum of task times). The *recent rate*
is the relative improvement of the task's best time per trial over its last ``window`` rounds (Ansor's
backward gradient); ``1 / trials`` is the optimistic forward guess that the next trial improves as much
as an average one so far (Ansor's ``best / trials``, relative to the best). A task whose search has
finished (space exhausted, or stopped early) gets no more rounds. With no improvement anywhere the
rounds go roughly in proportion to the shares; a task that keeps improving draws more.
"""

from __future__ import annotations

from dataclasses import dataclass, field

WINDOW = 3  # rounds of the backward gradient (Ansor's backward_window_size)
ALPHA = 0.2  # weight of the backward gradient against the optimistic forward one (Ansor's alpha)


@dataclass
class TaskProgress:
    """What the scheduler knows of one task: its weight and how its best time moved."""

    share: float  # of the timed run's dispatch time
    # (trials so far, best time so far) after each round; the first entry is the default config (0 trials)
    history: list[tuple[int, float]] = field(default_factory=list)
    finished: bool = False

    @property
    def trials(self) -> int:
        return self.history[-1][0] if self.history else 0


def recent_rate(task: TaskProgress, window: int = WINDOW) -> float:
    """Relative improvement of the best time per trial over the last ``window`` rounds (0 without any)."""
    if len(task.history) < 2:
        return 0.0
    then_trials, then_best = task.history[max(0, len(task.history) - 1 - window)]
    now_trials, now_best = task.history[-1]
    if now_trials <= then_trials or now_best <= 0:
        return 0.0
    return max(0.0, (then_best - now_best) / now_best / (now_trials - then_trials))


def expected_gain(task: TaskProgress, window: int = WINDOW, alpha: float = ALPHA) -> float:
    """Expected relative decrease of the program's time per further trial of ``task``."""
    forward = 1.0 / max(task.trials, 1)
    return task.share * (alpha * recent_rate(task, window) + (1 - alpha) * forward)


def next_task(tasks: list[TaskProgress], window: int = WINDOW, alpha: float = ALPHA) -> int | None:
    """Index of the task that gets the next round, None when every task has finished.

    A task with no trials yet goes first (warm-up, in order); then the largest ``expected_gain``."""
    open_tasks = [i for i, task in enumerate(tasks) if not task.finished]
    if not open_tasks:
        return None
    for i in open_tasks:
        if task_is_new(tasks[i]):
            return i
    return max(open_tasks, key=lambda i: expected_gain(tasks[i], window, alpha))


def task_is_new(task: TaskProgress) -> bool:
    """No round has been spent on the task in this session (resumed trials count as its first rounds)."""
    return len(task.history) < 2
