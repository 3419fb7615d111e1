"""Ctrl-C during training: the first SIGINT asks the loop to stop after the step in flight (which is then
complete: weights, optimizer, data cursor and step number agree) and to save that state; a second one
exits at once (status 130) without writing anything, so a checkpoint write it cuts short is a hidden temp
folder the next save removes, and ``latest.json`` still names the last complete checkpoint.

A ``KeyboardInterrupt`` raised inside a step would leave the state half-updated (the next batch drawn,
the weights partly stepped), which is why the signal only sets a flag.
"""

from __future__ import annotations

import os
import signal
import threading

EXIT_INTERRUPTED = 130


class StopRequest:
    """``with StopRequest() as stop: ... if stop.requested: ...`` — installs the handler in the main thread
    (elsewhere Python delivers no signals, and the flag simply stays False)."""

    def __init__(self, message: str = "orion train: stopping after this step and saving a checkpoint "
                                      "(Ctrl-C again: exit now without saving)"):
        self.requested = False
        self.message = message
        self._old = None

    def _handle(self, signum, frame) -> None:
        if self.requested:
            os.write(2, b"\norion train: interrupted again, exiting without saving\n")
            os._exit(EXIT_INTERRUPTED)
        self.requested = True
        os.write(2, ("\n" + self.message + "\n").encode())

    def __enter__(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)
            self._old = None
