"""Batches of problems in this process or in forked worker processes, each with one BLAS
thread: the batches, and so the numbers, are the same either way."""

from __future__ import annotations

import multiprocessing as mp
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

import numpy as np
from threadpoolctl import threadpool_limits
from tqdm import tqdm

from .batch import _solve_batch
from .result import ProbeResult
from .state import SolveContext

_WORKER_ENV: SolveContext | None = None  # a worker process's copy of the batches' environment (_map_batches)


def _init_worker(env: SolveContext, memmap: tuple | None) -> None:
    """A worker process's start: keep the environment (the index reopened from its file when
    ``memmap`` = ``(filename, offset, shape)``) and run one BLAS thread."""
    global _WORKER_ENV
    if memmap is not None:  # the index reopened from its file, not copied through a pipe
        filename, offset, shape = memmap
        env = replace(env, docs=np.memmap(filename, dtype=np.float32, mode="r", offset=offset, shape=shape))
    threadpool_limits(1)  # one BLAS thread per worker: the workers are the parallelism
    _WORKER_ENV = env


def _worker_batch(ps: list[int]) -> tuple[dict[int, ProbeResult], int]:
    return _solve_batch(_WORKER_ENV, ps)  # type: ignore[arg-type]


def _memmap_of(docs: np.ndarray) -> tuple | None:
    """``(filename, offset, shape)`` when the index ``docs`` is (a view of) a whole float32
    C-contiguous memory map, which workers can reopen; else None."""
    base = docs.base if isinstance(docs.base, np.memmap) else docs
    if (
        isinstance(base, np.memmap)
        and base.dtype == np.float32
        and base.flags.c_contiguous
        and base.shape == docs.shape
    ):
        return (base.filename, base.offset, base.shape)
    return None


def dispatch_order(env: SolveContext, batches: list[list[int]]) -> list[int]:
    """The order in which worker processes take the batches: the largest predicted cost first
    (longest-processing-time-first scheduling), ties in batch order. The cost proxy is the
    batch's number of gold documents (summed over its problems' queries): on NFCorpus × MiniLM
    it predicts the 8 batches' seconds within 1.6 s RMS (4–30 s), since
    large gold sets carry the long solves and the large proofs. Only the order changes, not a
    batch: the results are the same in any order. Returns batch indices."""
    cost = [sum(len(env.golds[q]) for p in ps for q in env.problems[p]) for ps in batches]
    return sorted(range(len(batches)), key=lambda b: -cost[b])


def _map_batches(env: SolveContext, batches: list[list[int]], workers: int, progress: bool):
    """Yield ``_solve_batch`` of each batch: in this process, in order, or with ``workers`` > 1
    and more than one batch in ``min(workers, len(batches))`` worker processes (forked: the
    environment is inherited, nothing re-imports a script's top level), each with one BLAS
    thread, which take the batches largest first (``dispatch_order``) and yield them in that
    order. Batches are the same either way, so the results are too."""
    it = tqdm(total=len(batches), desc="probe", unit="batch") if progress else None
    if workers > 1 and len(batches) > 1:
        if env.prove:  # the proofs' solvers, imported once here: forked workers inherit them instead of each importing
            import scipy.optimize  # noqa: F401  (~0.4 s per process, as much as a small probe call's whole work)
        with ProcessPoolExecutor(
            min(workers, len(batches)),
            mp_context=mp.get_context("fork"),
            initializer=_init_worker,
            initargs=(env, _memmap_of(env.docs)),
        ) as pool:
            for out in pool.map(_worker_batch, [batches[b] for b in dispatch_order(env, batches)]):
                if it is not None:
                    it.update()
                yield out
    else:
        for ps in batches:
            with threadpool_limits(1):  # as in a worker: the numbers do not depend on the thread count
                out = _solve_batch(env, ps)
            if it is not None:
                it.update()
            yield out
    if it is not None:
        it.close()
