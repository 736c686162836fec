"""Progress of long operations: a bar on a terminal, plain lines anywhere else.

On a terminal the bar is redrawn in place (``\\r``) at most ten times a second::

    moving node-1 -> node-3 [###########.............]  46%  4,600/10,000 records  1.2 s  eta 1.4 s

Elsewhere (a log file, CI, a pipe) it writes one plain line when it starts, one every
``interval`` seconds while it runs, and one when it ends, so logs stay readable::

    moving node-1 -> node-3: started
    moving node-1 -> node-3: 4,600/10,000 records (46%) after 5.0 s
    moving node-1 -> node-3: done, 10,000/10,000 records in 6.1 s

Usage::

    with Progress("loading", total=n, unit="records") as bar:
        for batch in batches:
            ...
            bar.advance(len(batch))
    # or bar.update(done, total=...) with absolute figures; bar.note("...") for a line

The clock and the stream are parameters, so tests drive it without sleeping.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import TextIO

__all__ = ["Progress"]


def _count(n: float) -> str:
    return f"{n:,.0f}" if float(n).is_integer() else f"{n:,.1f}"


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


class Progress:
    """A progress report for one operation.

    Args:
        label: what is going on ("moving node-1 -> node-3").
        total: how much there is to do, when known (a bar and a percentage are shown).
        unit: what is counted ("records"), shown after the figures.
        stream: where to write (default ``sys.stderr``).
        tty: draw a bar in place; default: whether ``stream`` is a terminal.
        interval: seconds between plain lines off a terminal (default 5).
        clock: seconds, monotonic.
        width: characters of the bar.
    """

    def __init__(
        self,
        label: str,
        total: float | None = None,
        *,
        unit: str = "",
        stream: TextIO | None = None,
        tty: bool | None = None,
        interval: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        width: int = 24,
    ) -> None:
        self.label = label
        self.total = total
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        if tty is None:
            isatty = getattr(self.stream, "isatty", None)
            tty = bool(isatty()) if callable(isatty) else False
        self.tty = tty
        self.interval = interval
        self._clock = clock
        self.width = width
        self.done: float = 0
        self.note_text = ""
        self.started = clock()
        self._last_draw = -1e18
        self._drawn = False  # a bar is on the current terminal line
        self.finished = False
        if not self.tty:
            self._write_line(f"{self.label}: started")
            self._last_draw = self.started

    # -- reporting -----------------------------------------------------------------------

    def update(self, done: float, *, total: float | None = None, note: str | None = None) -> None:
        """Set how much is done (and the total, and a short note, when they change)."""
        self.done = done
        if total is not None:
            self.total = total
        if note is not None:
            self.note_text = note
        self._maybe_draw()

    def advance(self, n: float = 1, *, note: str | None = None) -> None:
        """Add ``n`` to what is done."""
        self.update(self.done + n, note=note)

    def note(self, message: str) -> None:
        """Write ``message`` on a line of its own (above the bar on a terminal)."""
        if self.tty and self._drawn:
            self.stream.write("\r\x1b[K")
            self._drawn = False
        self._write_line(message)
        if self.tty and not self.finished:
            self._draw()

    def finish(self, message: str = "done") -> None:
        """End the report with a final line: ``label: message, figures in T``."""
        if self.finished:
            return
        self.finished = True
        elapsed = self._clock() - self.started
        figures = self._figures()
        line = f"{self.label}: {message}" + (f", {figures}" if figures else "")
        line += f" in {_duration(elapsed)}"
        if self.tty and self._drawn:
            self.stream.write("\r\x1b[K")
            self._drawn = False
        self._write_line(line)

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.finish()
        elif issubclass(exc_type, KeyboardInterrupt):
            self.finish("interrupted")
        else:
            self.finish(f"failed ({exc_type.__name__})")

    # -- drawing -------------------------------------------------------------------------

    def fraction(self) -> float | None:
        """Done / total, clamped to [0, 1]; None when the total is unknown."""
        if not self.total:
            return None
        return min(1.0, max(0.0, self.done / self.total))

    def _figures(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        if self.total:
            return f"{_count(self.done)}/{_count(self.total)}{unit}"
        return f"{_count(self.done)}{unit}" if self.done or self.unit else ""

    def render(self) -> str:
        """The bar's text as it would be drawn now (without ``\\r``)."""
        elapsed = self._clock() - self.started
        parts = [self.label]
        frac = self.fraction()
        if frac is not None:
            filled = round(frac * self.width)
            parts.append("[" + "#" * filled + "." * (self.width - filled) + "]")
            parts.append(f"{100 * frac:3.0f}%")
        figures = self._figures()
        if figures:
            parts.append(figures)
        parts.append(_duration(elapsed))
        if frac is not None and 0 < frac < 1 and elapsed > 0.5:
            parts.append(f"eta {_duration(elapsed * (1 - frac) / frac)}")
        if self.note_text:
            parts.append(self.note_text)
        return "  ".join(parts)

    def _maybe_draw(self) -> None:
        if self.finished:
            return
        now = self._clock()
        if self.tty:
            if now - self._last_draw >= 0.1:
                self._draw()
        elif now - self._last_draw >= self.interval:
            self._last_draw = now
            frac = self.fraction()
            pct = "" if frac is None else f" ({100 * frac:.0f}%)"
            figures = self._figures() or "running"
            note = f"; {self.note_text}" if self.note_text else ""
            elapsed = _duration(now - self.started)
            self._write_line(f"{self.label}: {figures}{pct} after {elapsed}{note}")

    def _draw(self) -> None:
        self._last_draw = self._clock()
        self.stream.write("\r\x1b[K" + self.render())
        self.stream.flush()
        self._drawn = True

    def _write_line(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()
