"""Data-parallel training over MPI (mpi4py): ``mpiexec -n N orion train ...``.

Only a process launched by an MPI launcher (PMI_RANK/PMI_SIZE: MPICH, Intel MPI; OMPI_COMM_WORLD_*: Open
MPI; MV2_COMM_WORLD_*: MVAPICH) with more than one rank imports mpi4py; everything else trains as before.
The launcher's variables are checked before any work (:func:`launched`): a value that is no rank/size, or
two launchers' variables that disagree, is a :class:`LaunchError`; so is an MPI world that is not the one
they describe (:func:`from_env`: e.g. ``PMI_SIZE=2`` exported by hand, or a launcher of another MPI than
mpi4py's, both of which give every process a 1-rank world). Such a run is refused rather than trained as
one process: every process of such a launch would believe it is alone and write the same checkpoints.

Each rank runs its own device programs on its own share of every step:

* data: the step's ``accum`` (global, ``N x`` the per-rank ``--accum``) microbatches are drawn in the
  order one process would draw them, rank r taking the r-th contiguous run of ``accum / N`` — so the
  examples and their order equal one process with ``--accum N x accum``, and every rank keeps the same
  data position (any rank's checkpoint state is the run's);
* gradients: each bucket (a layer's gradients, in backward order, then embedding/final norm/classifier;
  accumulate.py) is reduced on a communication thread as soon as the dW worker finishes it, overlapping
  the rest of the backward. The sum is in RANK ORDER, never MPI_Allreduce's unspecified order: rank p
  owns the p-th chunk of the bucket, receives every rank's copy of it (Isend/Irecv), adds them as
  ``((g0 + g1) + g2) ...`` and sends the sum back to all. One microbatch per rank therefore gives weights
  bitwise equal to one process with ``--accum N`` (accumulate.py folds microbatches the same way);
* every wait polls non-blocking requests against a deadline (``--dist-timeout``): a rank that hangs or
  left makes the others print who is missing and MPI_Abort the job instead of hanging.

Rank 0 alone writes checkpoints, exports and prints; the others keep quiet. A checkpoint holds the global
``accum``, so a run resumes on any rank count that divides it (an error names the ones that do).
"""

from __future__ import annotations

import hashlib
import os
import pickle
import queue
import re
import sys
import threading
import time

import numpy as np

from .errors import ResumeMismatch, TrainError

ENV = (("PMI_RANK", "PMI_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
       ("MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE"))
DEFAULT_TIMEOUT = 300.0      # seconds a rank waits for the others (a step's skew between ranks must stay below)
_TAG_SCATTER, _TAG_GATHER = 11, 12


class LaunchError(TrainError):
    """The MPI launcher's environment variables are malformed or do not describe this process's MPI world."""


_INT = re.compile(r"\s*-?\d{1,12}\s*")


def _env_int(name: str) -> int:
    raw = os.environ[name]
    if not _INT.fullmatch(raw):
        raise LaunchError(f"the MPI launcher variable {name}={raw!r} is not an integer; it is set by mpiexec (do not "
                          f"set it by hand): unset it for a single-process run, or launch with mpiexec -n N")
    return int(raw)


def launched() -> tuple[int, int] | None:
    """(rank, size) when an MPI launcher started this process with more than one rank, else None. The
    variables of every launcher present must be a rank in [0, size) with size >= 1, and agree with each other
    (some launchers set two sets); anything else is a :class:`LaunchError` naming the variables."""
    seen: list[tuple[str, str, int, int]] = []
    for rv, sv in ENV:
        if rv not in os.environ or sv not in os.environ:
            continue
        rank, size = _env_int(rv), _env_int(sv)
        if size < 1 or not 0 <= rank < size:
            why = f"{sv} must be >= 1" if size < 1 else f"{rv} must be in [0, {sv}) = [0, {size})"
            raise LaunchError(f"the MPI launcher variables {rv}={os.environ[rv].strip()} {sv}={os.environ[sv].strip()} "
                              f"describe no rank of a job ({why}); they are set by mpiexec (do not set them by "
                              f"hand): unset them for a single-process run, or launch with mpiexec -n N")
        seen.append((rv, sv, rank, size))
    if not seen:
        return None
    rv, sv, rank, size = seen[0]
    for rv2, sv2, rank2, size2 in seen[1:]:
        if (rank2, size2) != (rank, size):
            raise LaunchError(f"two MPI launchers' variables disagree: {rv}={rank} {sv}={size} but {rv2}={rank2} "
                              f"{sv2}={size2} (left over from another job, or a launcher run inside another): "
                              f"unset the stale ones")
    return (rank, size) if size > 1 else None


def _env_names() -> str:
    """The launcher variables that are set, as NAME=value."""
    return " ".join(f"{rv}={os.environ[rv].strip()} {sv}={os.environ[sv].strip()}" for rv, sv in ENV
                    if rv in os.environ and sv in os.environ)


def from_env(timeout: float | None = None) -> "Comm | None":
    """The MPI world of this process (mpi4py imported only here), or None when not launched by MPI. Raises
    :class:`LaunchError` when the launcher's variables are malformed or describe another world than MPI's."""
    w = launched()
    if w is None:
        return None
    try:
        from mpi4py import MPI  # optional: mpi4py (the distributed extra)
    except ImportError as e:
        raise TrainError(f"launched as MPI rank {w[0]} of {w[1]}, but mpi4py cannot be imported ({e}); install "
                         f"the distributed extra: pip install \"orion-ane[distributed]\"") from None
    world = MPI.COMM_WORLD
    actual = (world.Get_rank(), world.Get_size())
    if actual != w:
        mpi_name = " ".join(MPI.Get_library_version().splitlines()[0].split())
        # each process would train alone (or index ranks that do not exist) while all write the same files
        raise LaunchError(f"the launcher variables {_env_names()} say this is MPI rank {w[0]} of {w[1]}, but "
                          f"MPI (mpi4py: {mpi_name}) reports rank "
                          f"{actual[0]} of {actual[1]}: this process was not started by that launcher's mpiexec "
                          f"(variables set by hand or left over from another job, or an mpiexec of another MPI "
                          f"than mpi4py's). Launch with mpiexec -n {w[1]} of the MPI mpi4py was built with, or "
                          f"unset them for a single-process run")
    return Comm(MPI, DEFAULT_TIMEOUT if timeout is None else float(timeout))


class Comm:
    def __init__(self, MPI, timeout: float):
        self.MPI = MPI
        world = MPI.COMM_WORLD
        self.rank, self.size = world.Get_rank(), world.Get_size()
        self.data = world.Dup()              # gradient buckets (communication thread)
        self.ctrl = world.Dup()              # small control messages (main thread)
        self.timeout = timeout
        self.step = 0                        # for messages
        self.reducer: Reducer | None = None
        self._stop = None
        self.stop_agreed = False             # some rank was asked to stop (Ctrl-C): all stop after this step

    @property
    def is_root(self) -> bool:
        return self.rank == 0

    # ---------------------------------------------------------------------------- waiting
    def wait(self, reqs: list, peers: list[int], what: str) -> None:
        """Completes ``reqs`` (``peers[i]``: the rank of ``reqs[i]``, -1 for a collective), polling against the
        deadline; past it, aborts the job naming the ranks that did not answer."""
        if not reqs:
            return
        deadline = time.monotonic() + self.timeout
        spins = 0
        while not self.MPI.Request.Testall(reqs):
            if time.monotonic() > deadline:
                missing = sorted({p for r, p in zip(reqs, peers) if not r.Test() and p >= 0})
                who = f"rank(s) {', '.join(map(str, missing))}" if missing else "at least one other rank"
                self.abort(f"no {what} from {who} within "
                           f"{self.timeout:g} s (step {self.step + 1}): that rank died or hangs. Aborting all "
                           f"{self.size} ranks. If steps legitimately differ that much between ranks, raise "
                           f"--dist-timeout.", 3)
            spins += 1
            if spins > 64:                   # each Testall drives MPI's progress; back off while a peer computes
                time.sleep(0.0002 if spins < 2000 else 0.001)

    def abort(self, msg: str, code: int = 1) -> None:
        print(f"orion train: rank {self.rank}/{self.size}: {msg}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        time.sleep(0.5)        # the launcher forwards our output asynchronously; MPI_Abort tears that down
        self.MPI.COMM_WORLD.Abort(code)

    def allgather(self, obj) -> list:
        """Every rank's ``obj`` (small, picklable), in rank order."""
        data = np.frombuffer(pickle.dumps(obj), np.uint8)
        n = np.array([data.size], np.int64)
        sizes = np.empty(self.size, np.int64)
        self.wait([self.ctrl.Iallgather(n, sizes)], [-1], "control message")
        out = np.empty(int(sizes.sum()), np.uint8)
        self.wait([self.ctrl.Iallgatherv(data, [out, sizes])], [-1], "control message")
        offs = np.concatenate([[0], np.cumsum(sizes)])
        return [pickle.loads(out[offs[p]:offs[p + 1]].tobytes()) for p in range(self.size)]

    def barrier(self) -> None:
        self.wait([self.ctrl.Ibarrier()], [-1], "barrier")

    # ---------------------------------------------------------------------------- the step
    def local_accum(self, accum: int) -> int:
        if accum % self.size:
            ok = [n for n in range(1, accum + 1) if accum % n == 0]
            raise ResumeMismatch(f"the run accumulates {accum} microbatches per step (global batch = batch x "
                                 f"{accum}), which {self.size} ranks cannot share evenly; launch with "
                                 f"mpiexec -n N for N in {ok}, or start a new run")
        return accum // self.size

    def watch(self, stop) -> None:
        """``stop``: the training loop's interrupt.StopRequest. Its flag travels with every step's exchange,
        so that all ranks stop after the same step (each rank's own flag may be set a step apart)."""
        self._stop, self.stop_agreed = stop, False

    def begin_step(self, data, batch: int, accum: int, stability) -> int:
        """Skips the earlier ranks' windows; returns this rank's microbatch count."""
        local = self.local_accum(accum)
        data.skip(self.rank * local * batch)
        self._stab0 = stability.as_dict()
        return local

    def end_step(self, data, batch: int, accum: int, loss_sum: float, n_done: int, finite: bool, stability):
        """Skips the later ranks' windows and combines the step's loss, token count, finiteness and
        stability counters as one process would have: in rank order, stopping after the first rank whose
        microbatch was non-finite; and the ranks' stop requests. Returns (loss_sum, n_done, finite, exposed
        communication seconds)."""
        local = self.local_accum(accum)
        data.skip((self.size - 1 - self.rank) * local * batch)
        t0 = time.perf_counter()
        mine = stability.as_dict()
        delta = {k: mine[k] - self._stab0.get(k, 0) for k in mine}
        parts = self.allgather((loss_sum, n_done, finite, delta, bool(getattr(self._stop, "requested", False))))
        self.stop_agreed = self.stop_agreed or any(p[4] for p in parts)
        t_comm = time.perf_counter() - t0 + (self.reducer.take_wait() if self.reducer else 0.0)
        total, n, ok = 0.0, 0, True
        counts = dict(self._stab0)
        for ls, nd, f, d, _ in parts:
            total += ls
            n += nd
            for k, v in d.items():
                counts[k] = counts.get(k, 0) + v
            ok = ok and f
            if not ok:
                break
        for k, v in counts.items():
            if hasattr(stability, k):
                setattr(stability, k, int(v))
        self.step += 1
        return total, n, ok, t_comm

    def check_start(self, trainer) -> None:
        """All ranks must start from the same weights, step, data and settings (a rank that read another
        checkpoint, --init or data file would silently train something else)."""
        self.local_accum(trainer.tc.accum)
        h = hashlib.blake2b(digest_size=16)
        for k in sorted(trainer.trainable):
            h.update(k.encode())
            h.update(np.ascontiguousarray(trainer.trainable[k]).tobytes())
        skip = ("device", "ckpt_dir", "blas_threads")
        mine = {"step": trainer.step, "weights": h.hexdigest(), "data": trainer.data.state(),
                "model": trainer.cfg.to_dict(),
                "train": {k: v for k, v in trainer.tc.to_dict().items() if k not in skip}}
        self.step = trainer.step
        every = self.allgather(mine)
        for p, other in enumerate(every):
            diff = [k for k in mine if other[k] != every[0][k]]
            if diff:
                raise TrainError(f"MPI rank {p} does not start where rank 0 does ({', '.join(diff)} differ): every "
                                 f"rank must see the same --model/--resume checkpoint, data and options (on several "
                                 f"machines: the same paths, e.g. a shared folder)")

    # ---------------------------------------------------------------------------- ending
    def finish(self, code: int) -> int:
        """Ends this rank's part. 0 (done), 75 (compile budget) and 130 (Ctrl-C: every rank stopped after the
        same step, see ``watch``) wait for every rank — rank 0 may still be writing its checkpoint or
        exporting — and return; any other code aborts the job (the others may be waiting for this rank)."""
        if code in (0, 75, 130):
            if self.reducer is not None:
                self.reducer.close()
            try:
                self.barrier()
            except KeyboardInterrupt:   # Ctrl-C again while waiting: leave now (MPI_Finalize would wait too)
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(130)
            return code
        sys.stdout.flush()
        self.abort(f"stopping all ranks (exit status {code})", code)
        return code


class Reducer:
    """Sums gradient buckets over the ranks in rank order, on its own thread, in submission order (the same
    on every rank: accumulate.StepGradients submits layer buckets in backward order, then the rest)."""

    def __init__(self, comm: Comm, flats: list[np.ndarray]):
        self.comm, self.flats = comm, flats
        self._q: queue.Queue = queue.Queue()
        self._cv = threading.Condition()
        self._pending = 0
        self._err: BaseException | None = None
        self._recv: dict = {}
        self.bytes_sent = 0
        self.busy_s = 0.0
        self._wait_s = 0.0
        comm.reducer = self
        self._thread = threading.Thread(target=self._run, name="orion-allreduce", daemon=True)
        self._thread.start()

    def submit(self, i: int) -> None:
        with self._cv:
            self._pending += 1
        self._q.put(i)

    def wait(self) -> None:
        t0 = time.perf_counter()
        with self._cv:
            while self._pending and self._err is None:
                self._cv.wait(0.05)              # short waits: Ctrl-C reaches the main thread
        self._wait_s += time.perf_counter() - t0
        if self._err is not None:
            raise self._err

    def take_wait(self) -> float:
        w, self._wait_s = self._wait_s, 0.0
        return w

    def close(self) -> None:
        self._q.put(None)
        self._thread.join(timeout=5.0)

    def _run(self) -> None:
        while True:
            i = self._q.get()
            if i is None:
                return
            t0 = time.perf_counter()
            try:
                self.reduce(i)
            except BaseException as e:  # noqa: BLE001 - handed to the main thread
                self._err = e
            self.busy_s += time.perf_counter() - t0
            with self._cv:
                self._pending -= 1
                self._cv.notify_all()

    def reduce(self, i: int) -> None:
        """Bucket ``i`` := the sum over ranks in rank order (every rank ends with the same bits)."""
        flat, c = self.flats[i], self.comm
        N, r = c.size, c.rank
        b = [flat.size * p // N for p in range(N + 1)]
        recv = self._recv.get(i)
        if recv is None:
            recv = self._recv[i] = np.empty((N, b[r + 1] - b[r]), np.float32)
        peers = [p for p in range(N) if p != r]
        reqs, who = [], []
        for p in peers:                       # my copy of chunk p to its owner; every copy of my chunk to me
            reqs += [c.data.Irecv(recv[p], source=p, tag=_TAG_SCATTER),
                     c.data.Isend(flat[b[p]:b[p + 1]], dest=p, tag=_TAG_SCATTER)]
            who += [p, p]
        c.wait(reqs, who, "gradients")
        own = flat[b[r]:b[r + 1]]
        recv[r] = own
        np.add(recv[0], recv[1], out=own)
        for p in range(2, N):
            own += recv[p]
        reqs, who = [], []
        for p in peers:                       # the summed chunks to everyone
            reqs += [c.data.Irecv(flat[b[p]:b[p + 1]], source=p, tag=_TAG_GATHER),
                     c.data.Isend(own, dest=p, tag=_TAG_GATHER)]
            who += [p, p]
        c.wait(reqs, who, "summed gradients")
        self.bytes_sent += 2 * (flat.size - own.size) * 4
