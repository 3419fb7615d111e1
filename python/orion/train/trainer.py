"""The training loop: data → device programs (forward/backward) → CPU gradients → AdamW → weight update.

Order of construction matters: weights are loaded (checkpoint, pretrained file or fresh init) first,
and only then are the device programs compiled, so a program can never run with pre-resume weights
(an upstream trainer got NaN on resume that way).

Every step records its loss, learning rate, loss scale, gradient norm, whether it was skipped, and the
split of its wall time (device evals, CPU work, weight update = surface staging / recompiles,
optimizer), plus the runtime's compile and load counts (0 for the dynamic strategy).

LoRA fine-tuning (``lora=`` an :class:`orion.lora.Adapter`): the base weights stay frozen (baked into
programs compiled once), the optimizer, gradients and checkpoints hold only the adapter tensors
(``<linear>.lora_A`` / ``.lora_B``), and the adapter config is part of the resume check.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from ..native import runtime
from ..errors import AneSimWarning
from ..models.fp16_safety import calibration_ids, check_residual_scale, resolve_fp16_plan
from . import checkpoint as ckpt_mod
from .data import TokenDataset, inputs_targets
from .errors import CheckpointError, ResumeMismatch, TrainError
from .interrupt import StopRequest
from .memory import check_memory
from ..models.config import LlamaConfig
from .model import check_params, config_from_state
from .optim import AdamW, LossScaler, Schedule, global_norm
from .programs import BudgetExhausted, LayerPrograms
from .stability import StabilityStats
from .tokenizer_files import tokenizer_files
from .train_config import TrainConfig
from .accumulate import step_gradients
from .step import StepEngine

log = logging.getLogger("orion")


PROBE_DATA_TOKENS = 256      # training tokens the start-of-run fp16 probe reads (besides the calibration text)


@dataclass
class StepRecord:
    step: int
    loss: float
    lr: float
    scale: float
    grad_norm: float
    skipped: bool
    tokens: int
    t_device: float
    t_cpu: float
    t_update: float
    t_optim: float
    t_total: float
    compiles: int
    loads: int
    t_comm: float = 0.0              # data-parallel runs: waiting for the other ranks' gradients (not overlapped)


@dataclass
class TrainResult:
    status: str                      # "done" | "stopped" (stop_after) | "budget" | "interrupted"
    step: int
    records: list = field(default_factory=list)
    val: list = field(default_factory=list)          # (step, val loss)
    checkpoint: str | None = None
    message: str = ""
    stats: dict = field(default_factory=dict)

    @property
    def losses(self) -> list[float]:
        return [r.loss for r in self.records]


def blas_threads(n: int | None):
    """Context manager limiting numpy's BLAS threads (threadpoolctl when installed; else a no-op)."""
    if not n:
        return contextlib.nullcontext()
    try:
        from threadpoolctl import threadpool_limits  # start-up: threadpoolctl (~6 ms) only when training runs
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(limits=int(n), user_api="blas")


def default_blas_threads(cfg: LlamaConfig) -> int | None:
    """1 for small models (thread spin-up costs more than it saves, and on a busy machine far more) and on
    small machines (the weight-gradient worker then leaves the other cores to the device evals, which
    the simulator runs on its own threads); None (BLAS default) otherwise."""
    if cfg.d_model <= 256 or (os.cpu_count() or 1) <= 4:
        return 1
    return None


def check_resume(state: dict, cfg: LlamaConfig, tc: TrainConfig, data_state: dict | None,
                 lora: dict | None = None) -> None:
    """Raises ResumeMismatch naming every setting that differs from the checkpointed run (``lora``: the
    adapter config of a LoRA run, None for full training)."""
    diffs = []
    old_lora = state.get("lora")
    if (old_lora is None) != (lora is None):
        diffs.append("the checkpoint is a " + ("LoRA" if old_lora else "full-training") + " run, this one is " +
                     ("LoRA" if lora else "full training"))
    elif lora is not None:
        for k in ("r", "alpha", "targets", "layers", "rslora"):
            if old_lora.get(k) != lora.get(k):
                diffs.append(f"lora.{k}: checkpoint {old_lora.get(k)!r}, now {lora.get(k)!r}")
    old_model = config_from_state(state["model"]).to_dict() if "model" in state else {}
    for k, v in cfg.to_dict().items():
        if k in old_model and old_model[k] != v:
            diffs.append(f"model.{k}: checkpoint {old_model[k]!r}, now {v!r}")
    old_train = state.get("train", {})
    for k in TrainConfig.RESUME_KEYS:
        if k in old_train and old_train[k] != getattr(tc, k):
            diffs.append(f"{k}: checkpoint {old_train[k]!r}, now {getattr(tc, k)!r}")
    od = state.get("data", {})
    if data_state is not None and od.get("fingerprint") and od["fingerprint"] != data_state.get("fingerprint"):
        diffs.append(f"data: the token stream differs from the checkpointed run's ({od.get('n_tokens')} tokens, "
                     f"now {data_state.get('n_tokens')})")
    if diffs:
        raise ResumeMismatch("cannot resume: " + "; ".join(diffs))


class Trainer:
    def __init__(self, cfg: LlamaConfig, tc: TrainConfig, params: dict, data: TokenDataset, *,
                 tokenizer=None, resume=None, profile=None, doctor_verdict=None, extra_state: dict | None = None,
                 lora=None, dist=None):
        """``dist``: the :class:`orion.train.distributed.Comm` of an ``mpiexec`` run (``tc.accum`` is then the
        global accumulation, shared by its ranks), None otherwise."""
        if tc.seq_len is None:
            tc = dataclasses.replace(tc, seq_len=cfg.n_ctx)
        if tc.seq_len > cfg.n_ctx:
            raise TrainError(f"seq_len {tc.seq_len} exceeds the model's context {cfg.n_ctx}")
        if data.seq_len != tc.seq_len:
            raise TrainError(f"dataset windows of {data.seq_len} tokens, training seq_len {tc.seq_len}")
        if tc.batch < 1 or tc.accum < 1 or tc.steps < 0:
            raise TrainError("batch and accum must be >= 1 and steps >= 0")
        check_memory(cfg, tc.batch, tc.seq_len, lora=lora is not None)
        self.cfg, self.tc, self.data, self.tokenizer = cfg, tc, data, tokenizer
        self.extra_state = dict(extra_state or {})
        check_params(cfg, params, "initial weights")
        self.params = params
        self.lora = lora
        if lora is not None:
            lora.config.check_trainable()
            self.extra_state["lora"] = lora.config.to_dict()
            self.extra_state["lora_base"] = lora.base
        # what the optimizer trains: every parameter, or (LoRA) only the adapter tensors, updated in place
        self.trainable = lora.params() if lora is not None else params
        self.opt = AdamW(self.trainable, weight_decay=tc.weight_decay)
        # the residual stream's scale inside the programs: chosen once from the initial weights (a resumed
        # run keeps its own); gradients at a stream that large are as small, so the loss scale starts higher
        if tc.residual_scale is not None:
            self.residual_scale = check_residual_scale(tc.residual_scale)
        elif resume is not None and "residual_scale" in resume.state:
            self.residual_scale = float(resume.state["residual_scale"])
        elif tc.fixes:            # probed on the calibration text and the start of the training data,
            calib = calibration_ids(cfg, tokenizer)[:max(1, cfg.n_ctx // 2)]     # one sequence within the context
            first = np.asarray(getattr(data, "train", ()), np.int64)[:min(cfg.n_ctx - len(calib), PROBE_DATA_TOKENS)]
            probe = calib + [int(t) for t in first]
            self.residual_scale = resolve_fp16_plan(cfg, params, probe_ids=probe).scale
        else:
            self.residual_scale = 1.0
        s0 = tc.loss_scale / self.residual_scale
        self.scaler = LossScaler(scale=s0, max_scale=max(LossScaler.max_scale, s0))
        self.sched = Schedule(tc.lr, tc.warmup, tc.steps, tc.min_lr_ratio)
        self.stability = StabilityStats()
        self.step = 0
        self.history: list = []
        # the run's tokenizer files, read once here and carried by every checkpoint and export: a resumed run
        # takes them from its checkpoint, a new one from where its tokenizer came from (the --init folder is
        # not read after the start, so a changed or deleted --init never slips a foreign tokenizer in)
        if resume is not None:
            self._tokenizer_files = resume.tokenizer_files() or tokenizer_files(tokenizer)
        else:
            self._tokenizer_files = tokenizer_files(tokenizer, self.extra_state.get("init"))
        if resume is not None:                                  # weights + state first ...
            check_resume(resume.state, cfg, tc, data.state(), self.extra_state.get("lora"))
            old_base = resume.state.get("lora_base")
            if lora is not None and old_base and lora.base and old_base != lora.base:
                raise ResumeMismatch(f"cannot resume: the checkpointed adapters were trained on other base weights "
                                     f"(fingerprint {old_base[:12]}, now {lora.base[:12]})")
            missing = [k for k in self.trainable if k not in resume.params]
            if lora is not None and missing:
                raise CheckpointError(f"checkpoint {resume.path}: adapter tensors missing: {missing[:4]}")
            for k, v in resume.params.items():
                if k in self.trainable:
                    self.trainable[k][...] = v
            self.opt.load_state(resume.optim, resume.state.get("optimizer", {}).get("t", 0))
            self.scaler.load(resume.state.get("scaler", {}))
            self.data.load_state(resume.state["data"])
            self.step = int(resume.state["step"])
            for k, v in resume.state.get("stability", {}).items():
                if hasattr(self.stability, k):
                    setattr(self.stability, k, int(v))
            self.history = list(resume.state.get("history", []))
        # ... then the device programs (compiled with the weights they will run)
        self.progs = LayerPrograms(cfg, tc.seq_len, params, tc.strategy, tc.device, fixes=tc.fixes, profile=profile,
                                   doctor_verdict=doctor_verdict, lora=lora, residual_scale=self.residual_scale)
        self.engine = StepEngine(cfg, self.progs, params, fixes=tc.fixes, lora=lora)
        self.dist = dist
        self.grads = step_gradients(self.trainable, cfg.n_layers, dist)
        if dist is not None:
            self.extra_state["ranks"] = dist.size
            dist.check_start(self)

    # -------------------------------------------------------------------------------- checkpoints
    def state(self) -> dict:
        return {"model": self.cfg.to_dict(), "train": self.tc.to_dict(), "strategy": self.tc.strategy,
                "optimizer": {"t": self.opt.t, "betas": [self.opt.b1, self.opt.b2], "eps": self.opt.eps},
                "scaler": self.scaler.state(), "data": self.data.state(),
                "rng": {"seed": self.tc.seed, "data_epoch": self.data.pos.epoch, "data_cursor": self.data.pos.cursor},
                "stability": self.stability.as_dict(), "history": self.history[-5000:],
                "tokenizer": getattr(self.tokenizer, "fingerprint", None), "residual_scale": self.residual_scale,
                **self.extra_state}

    def save(self) -> str | None:
        if not self.tc.ckpt_dir or (self.dist is not None and not self.dist.is_root):
            return None
        # a full-training checkpoint is a model (HF layout of its family); a LoRA one holds the adapters only
        return ckpt_mod.save(self.tc.ckpt_dir, self.step, self.trainable, self.opt.state_tensors(), self.state(),
                             self._tokenizer_files, keep=self.tc.keep, cfg=None if self.lora is not None else self.cfg)

    def tokenizer_files(self) -> dict:
        """The files of the run's tokenizer (checkpoints and exports carry them), as read at the start."""
        return dict(self._tokenizer_files)

    # -------------------------------------------------------------------------------- evaluation
    def evaluate(self, max_batches: int | None = None, split: str = "valid") -> float | None:
        """Mean loss over the first ``max_batches`` batches (default: ``eval_batches``) of the validation
        split, or (``split="test"``, every batch by default) of JSONL data's test split."""
        if split == "test":
            batches = self.data.test_batches(self.tc.batch, max_batches)
        else:
            batches = self.data.val_batches(self.tc.batch, max_batches or self.tc.eval_batches)
        total, n = 0.0, 0
        for batch in batches:
            s, k = self.engine.loss_only(*inputs_targets(batch))
            total, n = total + s, n + k
        return total / n if n else None

    # -------------------------------------------------------------------------------- one step
    def train_step(self) -> StepRecord:
        tc = self.tc
        c0 = runtime.counters()
        st0 = dict(self.progs.stats)
        t0 = time.perf_counter()
        self.grads.start()
        lr = self.sched(self.step)
        n_tok = tc.batch * tc.seq_len * tc.accum
        scale = self.scaler.scale
        loss_sum, n_done, finite, t_cpu, t_comm = 0.0, 0, True, 0.0, 0.0
        dist = self.dist
        accum = tc.accum if dist is None else dist.begin_step(self.data, tc.batch, tc.accum, self.stability)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", AneSimWarning)
            for k in range(accum):
                batch = self.data.next_batch(tc.batch)
                if not finite:
                    continue                          # keep the data stream aligned; the step is lost anyway
                self.grads.begin_micro(last=k == accum - 1)
                res = self.engine.microbatch(*inputs_targets(batch), self.grads, scale / n_tok)
                self.grads.end_micro()
                self.stability.add(res.stats)
                loss_sum += res.loss_sum
                n_done += res.n_tokens
                t_cpu += res.cpu_s
                finite = finite and res.finite
        for w in caught:                              # device saturations (C36) are counted, not printed
            if issubclass(w.category, AneSimWarning) and "[C36]" in str(w.message):
                self.stability.matmul_saturations += 1
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        t1 = time.perf_counter()
        self.grads.finish()
        if dist is not None:                 # the other ranks' losses, counters and finiteness, in rank order
            loss_sum, n_done, finite, t_comm = dist.end_step(self.data, tc.batch, tc.accum, loss_sum, n_done, finite,
                                                             self.stability)
        if self.lora is not None:            # a fused module's parts (Phi-3 qkv_proj) share one lora_A
            self.lora.tie_gradients(self.grads.grads)
        # the gradients were scaled for n_tok targets; where some do not count (masked prompts, padding) the
        # step's mean is over the n_done that do (all ranks': end_step summed them)
        per = n_tok / n_done if n_done and n_done != n_tok else 1.0
        gn = global_norm(self.grads) / scale * per if finite else float("nan")
        finite = finite and math.isfinite(gn)
        t_cpu += time.perf_counter() - t1 - t_comm
        t_opt = 0.0
        if finite:
            t2 = time.perf_counter()
            mul = (1.0 / scale) * (min(1.0, tc.clip / (gn + 1e-6)) if tc.clip > 0 else 1.0)
            if per != 1.0:
                mul *= per
            self.opt.step(self.trainable, self.grads, lr, grad_mul=mul)
            t_opt = time.perf_counter() - t2
        else:
            self.stability.skipped_steps += 1
            log.warning("orion train: step %d skipped (non-finite gradients or loss at loss scale %g)",
                        self.step, scale)
        self.scaler.update(finite)
        self.step += 1
        loss = loss_sum / max(1, n_done)
        update_err = None
        if finite:
            try:
                self.progs.update(None if self.lora is not None else self.params)
            except BudgetExhausted as e:
                update_err = e
        c1 = runtime.counters()
        st1 = self.progs.stats
        t_dev = st1["eval_s"] - st0["eval_s"]
        t_upd = (st1["stage_s"] - st0["stage_s"]) + (st1["update_s"] - st0["update_s"])
        rec = StepRecord(self.step, float(loss), lr, scale, float(gn), not finite, n_tok, t_dev, t_cpu, t_upd, t_opt,
                         time.perf_counter() - t0, c1["compiles"] - c0["compiles"], c1["loads"] - c0["loads"], t_comm)
        self.history.append(round(float(loss), 6) if math.isfinite(loss) else None)
        if update_err is not None:
            update_err.record = rec
            raise update_err
        return rec

    # -------------------------------------------------------------------------------- the loop
    def train(self, on_step=None, stop_after: int | None = None, on_eval=None, exit_on_second_interrupt: bool = False
              ) -> TrainResult:
        """Runs to ``tc.steps`` (or ``stop_after``). A first Ctrl-C stops after the step in flight and saves; a
        second raises KeyboardInterrupt without saving (``exit_on_second_interrupt``: exits the process, 130)."""
        with blas_threads(self.tc.blas_threads or default_blas_threads(self.cfg)):
            return self._train(on_step, stop_after, on_eval, exit_on_second_interrupt)

    def _train(self, on_step, stop_after, on_eval, exit_on_second) -> TrainResult:
        tc = self.tc
        res = TrainResult("done", self.step)
        with StopRequest(exit_on_second) as stop:
            if self.dist is not None:
                self.dist.watch(stop)             # MPI ranks stop after the same step: the flag is exchanged
            while self.step < tc.steps:
                # between steps: the state is that of a finished step
                if stop.requested if self.dist is None else self.dist.stop_agreed:
                    res.status = "interrupted"
                    res.checkpoint = self.save()
                    res.message = (f"interrupted at step {self.step}" +
                                   (f"; checkpoint in {tc.ckpt_dir}, continue with `orion train --resume "
                                    f"{tc.ckpt_dir}`" if res.checkpoint else ""))
                    break
                if stop_after is not None and self.step >= stop_after:
                    res.status = "stopped"
                    break
                try:
                    rec = self.train_step()
                except BudgetExhausted as e:
                    if getattr(e, "record", None) is not None:
                        res.records.append(e.record)
                        if on_step:
                            on_step(e.record)
                    res.status = "budget"
                    res.checkpoint = self.save()
                    res.message = (f"{e}. " + (f"Checkpoint written at step {self.step} to {tc.ckpt_dir}; continue "
                                               f"with `orion train --resume {tc.ckpt_dir}` (a new process has a "
                                               f"fresh budget), or use --strategy dynamic (compiles once)."
                                               if res.checkpoint else "No checkpoint dir was given, so the progress "
                                               "is lost; pass --ckpt-dir, or use --strategy dynamic."))
                    break
                res.records.append(rec)
                if on_step:
                    on_step(rec)
                if tc.eval_interval and self.step % tc.eval_interval == 0 and self.step < tc.steps:
                    v = self.evaluate()
                    if v is not None:
                        res.val.append((self.step, v))
                        if on_eval:
                            on_eval(self.step, v)
                if tc.ckpt_interval and self.step % tc.ckpt_interval == 0 and self.step < tc.steps:
                    res.checkpoint = self.save()
            if res.status in ("done", "stopped"):
                if res.status == "done":
                    v = self.evaluate()
                    if v is not None:
                        res.val.append((self.step, v))
                        if on_eval:
                            on_eval(self.step, v)
                res.checkpoint = self.save() or res.checkpoint
        res.step = self.step
        res.stats = self.stability.as_dict()
        return res

    def close(self) -> None:
        self.engine.close()
        self.progs.release()
