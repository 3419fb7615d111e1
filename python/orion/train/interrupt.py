"""Ctrl-C during training: the first SIGINT asks the loop to stop after the step in flight (which is then
complete: weights, optimizer, data cursor and step number agree) and to save that state; a second one
stops at once without writing anything: the command line exits (status 130), a library caller (a
notebook, whose kernel must survive) gets a KeyboardInterrupt. A checkpoint write it cuts short is a hidden
temp folder the next save removes, and ``latest.json`` still names the last complete checkpoint.

A ``KeyboardInterrupt`` raised inside a step would leave the state half-updated (the next batch drawn,
the weights partly stepped), which is why the first signal only sets a flag.
"""

from __future__ import annotations

import os
import signal
import threading

EXIT_INTERRUPTED = 130


class StopRequest:
    """``with StopRequest() as stop: ... if stop.requested: ...`` — installs the handler in the main thread
    (elsewhere Python delivers no signals, and the flag simply stays False)."""

    def __init__(self, exit_on_second: bool = False):
        self.requested = False
        self.exit_on_second = exit_on_second
        self._old = None

    def _handle(self, signum, frame) -> None:
        if self.requested:
            if self.exit_on_second:
                os.write(2, b"\norion train: interrupted again, exiting without saving\n")
                os._exit(EXIT_INTERRUPTED)
            raise KeyboardInterrupt("interrupted twice: stopped without saving")
        self.requested = True
        os.write(2, ("\norion train: stopping after this step and saving a checkpoint (Ctrl-C again: stop now "
                     "without saving)\n").encode())

    def __enter__(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)
            self._old = None
