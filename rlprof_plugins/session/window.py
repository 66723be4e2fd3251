"""Which engine iterations a session records: the step window.

Pure logic, no torch: the session asks it, at the start of each iteration,
whether recording should begin, and at the end whether the window is over.
Iterations are counted from the start request, from 0. The window is
half-open, ``[start, end)``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StepWindow:
    start: int = 0
    end: int | None = None

    def starts_at(self, iteration: int) -> bool:
        """Recording begins before iteration ``iteration`` runs."""
        return iteration == self.start

    def records(self, iteration: int) -> bool:
        return iteration >= self.start and (self.end is None or iteration < self.end)

    def over_after(self, iteration: int) -> bool:
        """The window is complete once iteration ``iteration`` has run."""
        return self.end is not None and iteration + 1 >= self.end

    @property
    def length(self) -> int | None:
        return None if self.end is None else self.end - self.start
