"""``orion plot RUN``: ``loss.png`` (training and validation loss, tokens/s) from a training run's log."""

from __future__ import annotations

from .common import check_writable_target


def add_plot_parser(sub) -> None:
    p = sub.add_parser("plot", help="plot a training run's loss and throughput (needs orion-ane[plot])",
                       description="Writes loss.png (train + validation loss, tokens/s) from the JSONL log orion "
                                   "train keeps in its run folder. Needs matplotlib: pip install 'orion-ane[plot]'.")
    p.add_argument("run", metavar="RUN", help="a run folder (--ckpt-dir of orion train) or its JSONL log")
    p.add_argument("-o", "--output", metavar="PNG", default=None, help="where to write (default: RUN/loss.png)")
    p.set_defaults(func=cmd_plot)


def cmd_plot(args) -> int:
    from ..train.plot import plot_run  # start-up: orion.train.plot loads only for `orion plot`
    if args.output is not None:
        check_writable_target("--output", args.output, folder=False)     # before the log is read
    print(f"wrote {plot_run(args.run, args.output)}")
    return 0
