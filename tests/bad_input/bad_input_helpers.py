"""What the bad-input tests share (a plain module, no conftest: tests/ has one conftest namespace): the
exit status of an orion command line, and a snapshot of a folder to show that a refusal changed nothing."""

from __future__ import annotations

from orion.cli import main


def run_cli(argv) -> int:
    """orion's exit status for ``argv`` (argparse's own usage errors included, as SystemExit)."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


def snapshot(folder) -> dict:
    """Every path under ``folder`` with its bytes (None for folders) and its modification time."""
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns) if p.is_file() else None
            for p in sorted(folder.rglob("*"))}


def error_line(err: str) -> str:
    """The last line of ``err`` (a command's stderr), asserted to be one ``orion: error:`` line with no
    traceback anywhere."""
    line = err.rstrip().splitlines()[-1]
    assert line.startswith("orion: error: ") and "Traceback" not in err, err[-2000:]
    return line
