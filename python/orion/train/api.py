"""``orion.train.run(...)``: ``orion train`` from Python - in a notebook - with the same options, the same
defaults (one table, :data:`orion.train.defaults.DEFAULTS`) and the same code path as the command line, so
the same seed gives the same weights bit for bit from either entry point.

    import orion.train
    run = orion.train.run(model="Qwen/Qwen3-0.6B", data="chats/", lora="r=8,alpha=16", mask_prompt=True,
                          steps=100, on_step=lambda rec: print(rec.step, rec.loss))
    run                       # an orion.train.Run: checkpoints, last losses (HTML in a notebook)

Keywords are the command's flags without the dashes (``mask_prompt=True`` for ``--mask-prompt``,
``lr=1e-3`` for ``--lr 1e-3``); a flag that takes no value is a bool. ``progress``: a progress bar
(``tqdm.auto``: a widget in Jupyter); ``on_step(record)`` is called after every optimizer step (loggers).
A bad option raises :class:`~orion.flags.UsageError` before any work, as the command exits 2."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import OrionError
from .defaults import DEFAULT_CKPT_DIR
from .errors import TrainError
from .run_info import Run
from .run_options import EXIT_BUDGET, check_train_args, model_flags, parse_keywords

__all__ = ["run", "RunOutcome"]


@dataclass
class RunOutcome:
    """What :func:`run` returns when the run keeps no checkpoints (``no_ckpt=True``): the final weights (an
    adapter merged), the adapter, the config and the :class:`~orion.train.TrainResult`."""
    params: dict
    adapter: object
    config: object
    result: object


def run(*, on_step=None, progress: bool = True, **options):
    """Trains as ``orion train`` with ``options`` (see the module docstring); returns an
    :class:`orion.train.Run` of the run folder (or a :class:`RunOutcome` with ``no_ckpt=True``). Raises
    the typed errors the command reports (:class:`~orion.train.TrainError` and the other orion errors);
    an interrupted run raises ``KeyboardInterrupt`` after its checkpoint is written."""
    # start-up cost: the option table and the launch code (tokenizers, quantization, sampling) load when a run
    # starts, not with orion.train
    from .launch import run_parsed  # start-up: orion.train.launch loads only when training runs
    args = parse_keywords(options, progress)
    args.on_step = on_step
    model_flags(args)
    check_train_args(args)
    outcome: dict = {}
    code = run_parsed(args, None, outcome)
    if code == 130:
        raise KeyboardInterrupt("orion.train.run: interrupted (a checkpoint was written)")
    if code == EXIT_BUDGET:
        raise TrainError("orion.train.run: the compile budget ran out (a checkpoint was written: run again with "
                         "resume=<the run folder>)")
    if code != 0:
        raise OrionError(f"orion.train.run: the run ended with status {code}")
    if not outcome:                                     # an already finished run, resumed
        return Run(args.resume or args.ckpt_dir or DEFAULT_CKPT_DIR)
    if outcome.get("checkpoint"):
        return Run(outcome["checkpoint"])
    return RunOutcome(outcome["params"], outcome.get("adapter"), outcome["config"], outcome["result"])
