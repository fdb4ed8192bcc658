"""The probe scattered over shards (config ``probe.shards`` > 1: rule ``probe_shard`` per shard,
then rule ``probe`` gathers), with the same numbers as one ``probe()`` call.

``probe()`` splits its problems (queries sharing one w: a text-tied group is one problem) into
batches whose size depends only on the number of problems and the dimension, never on the
thread count, and a batch's results are the same in this process or a worker's (``workers``).
A shard here is a contiguous run of those same batches (``shard_batches``): shard k of n
builds the environment of every query (``setup._environment``: the index's duplicate groups,
norms, twins, problems), forms every batch exactly as ``solver._probe`` does and solves only
its own (``probe_shard``). So a text-tied group never straddles two shards (it is one problem,
in one batch), and every result is the bit-identical result of the unsharded call. The gather
(``gather_shards``) puts the shards' results back in query order and then runs what
``solver._probe`` runs after its batches over every query: the iteration-cap warning and the
second, graded solve of the duplicates (``refine.refine_duplicates``), whose batches depend on
how many queries it re-solves, so it runs once, over all of them, in the gather.

This module mirrors ``solver.probe`` / ``solver._probe`` step by step without changing them;
tests/probe/test_shards.py checks the sharded and unsharded outputs byte for byte.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from threadpoolctl import threadpool_limits

from .config import _D, SolveSettings
from .refine import refine_duplicates
from .result import ProbeResult
from .solver import checked_index, second_solve, solve_context
from .workers import _map_batches

log = logging.getLogger("capgap.probe")


@dataclass(frozen=True)
class ProbeShard:
    """What one probe shard hands the gather: ``results`` ``{query row: ProbeResult}`` for the
    queries of its batches, ``capped`` (how many of them hit ``max_iter``), and which shard it is
    of how many queries and problems (checked by ``gather_shards``)."""

    shard: int
    n_shards: int
    n_queries: int
    n_problems: int
    results: dict
    capped: int


def shard_batches(n_batches: int, n_shards: int, shard: int) -> range:
    """The batches (numbered from 0, in ``probe()``'s order) of probe shard ``shard`` (0-based)
    of ``n_shards``: ``floor(shard * n_batches / n_shards)`` up to ``floor((shard + 1) *
    n_batches / n_shards)``, contiguous, every batch in exactly one shard (empty shards when
    there are more shards than batches). Raises ``ValueError`` for ``n_shards < 1`` or
    ``shard`` outside ``[0, n_shards)``."""
    if n_shards < 1 or not 0 <= shard < n_shards:
        raise ValueError(f"probe shard {shard} of {n_shards}: need n_shards >= 1 and 0 <= shard < n_shards")
    return range(shard * n_batches // n_shards, (shard + 1) * n_batches // n_shards)


def probe_shard(
    D: np.ndarray,
    gold_sets: Sequence[Sequence[int]],
    n_shards: int,
    shard: int,
    threads: int | None = None,
    progress: bool = False,
    **kwargs,
) -> ProbeShard:
    """Shard ``shard`` of ``n_shards`` of ``probe(D, gold_sets, **kwargs)``: the results of the
    queries in its batches (``shard_batches``), each bit-identical to the unsharded call's
    first solve (before ``refine_duplicates``, which ``gather_shards`` runs). ``D``: ``(n_docs,
    dim) float32`` (a memory map is read in place; worker processes reopen it); ``kwargs``:
    ``probe()``'s keywords (``C``, ``eps``, ..., ``tie_groups``, ``duplicates``, ``solve``,
    ``pairs``). Raises as ``probe()`` and ``shard_batches``."""
    env, batches, settings = _prepare(D, gold_sets, threads, **kwargs)
    mine = [batches[b] for b in shard_batches(len(batches), n_shards, shard)]
    results, capped = {}, 0
    with threadpool_limits(int(threads) if threads else None):
        for out, n_capped in _map_batches(env, mine, settings.workers, progress):
            capped += n_capped
            results.update(out)
    log.info(
        "probe shard %d of %d: %d of %d batches, %d queries", shard, n_shards, len(mine), len(batches), len(results)
    )
    return ProbeShard(shard, n_shards, len(gold_sets), len(env.problems), results, capped)


def gather_shards(
    D: np.ndarray,
    gold_sets: Sequence[Sequence[int]],
    shards: Sequence[ProbeShard],
    threads: int | None = None,
    **kwargs,
) -> list[ProbeResult]:
    """``probe(D, gold_sets, **kwargs)`` from its shards (``probe_shard`` results of the same
    ``D`` ``(n_docs, dim)``, ``gold_sets`` and ``kwargs``, in shard order): every query's result in order, after
    the iteration-cap warning and the duplicates' second solve that ``solver._probe`` runs after
    its batches. Returns one ``ProbeResult`` per query, equal to ``probe()``'s. Raises
    ``ValueError`` when the shards are not shards 0..n-1 of one n of this query set, or do not
    cover every query exactly once."""
    env, batches, settings = _prepare(D, gold_sets, threads, solves=False, **kwargs)
    n = len(shards)
    results: list[ProbeResult | None] = [None] * len(gold_sets)
    capped = 0
    for k, sh in enumerate(shards):
        if (sh.shard, sh.n_shards, sh.n_queries, sh.n_problems) != (k, n, len(gold_sets), len(env.problems)):
            raise ValueError(
                f"probe shard {k} of {n}: got shard {sh.shard} of {sh.n_shards} over {sh.n_queries} "
                f"queries ({sh.n_problems} problems); expected {len(gold_sets)} queries "
                f"({len(env.problems)} problems)"
            )
        want = sorted(q for b in shard_batches(len(batches), n, k) for p in batches[b] for q in env.problems[p])
        if sorted(sh.results) != want:
            raise ValueError(
                f"probe shard {k} of {n}: holds {len(sh.results)} queries, not the {len(want)} of its batches"
            )
        capped += sh.capped
        for q, r in sh.results.items():
            results[q] = r
    with threadpool_limits(int(threads) if threads else None):
        if capped:
            log.warning(
                "probe: %d of %d queries hit the iteration cap (max_iter=%d) before eps=%g",
                capped,
                len(gold_sets),
                settings.max_iter,
                settings.eps,
            )
        if (
            settings.pairs == "gold" and settings.solve == "certificate" and settings.C_max > settings.C
        ):  # as solver._probe
            solve_again = second_solve(env.docs, env.golds, env.excls, env.dups, settings)
            results = refine_duplicates(env, results, env.grades, solve_again)
    return results  # type: ignore[return-value]


def _prepare(
    D,
    gold_sets,
    threads,
    C: float = _D["C"],
    eps: float = _D["eps"],
    max_iter: int = _D["max_iter"],
    batch_size: int | None = _D["batch_size"],
    lp_check_max_docs: int = _D["lp_check_max_docs"],
    C_max: float | None = _D["C_max"],
    excluded_sets=None,
    grades=None,
    tie_groups=None,
    depth: int = 0,
    duplicates=(),
    solve: str = _D["solve"],
    pairs: str = _D["pairs"],
    solves: bool = True,
):
    """``probe()``'s checks and ``solver._probe``'s set-up on the index ``D`` ``(n_docs, dim)``,
    step for step: ``(env, batches, settings)`` (``SolveSettings``, without a progress bar);
    ``solves=False``: no batch will run on ``env`` (``gather_shards``), so it holds no
    column-major copy of the index."""
    D = checked_index(D, solve, pairs)
    workers = int(threads) if threads else (os.cpu_count() or 1)
    settings = SolveSettings.resolved(
        C=C,
        C_max=C_max,
        eps=eps,
        max_iter=max_iter,
        batch_size=batch_size,
        lp_check_max_docs=lp_check_max_docs,
        depth=depth,
        solve=solve,
        pairs=pairs,
        workers=workers,
        progress=False,
    )
    with threadpool_limits(int(threads) if threads else None):
        env, batches = solve_context(
            D, gold_sets, settings, excluded_sets, grades, tie_groups, duplicates, solves=solves
        )[3:]
    return env, batches, settings
