"""The paper's parity retrieval task: geometrically easy, yet hard to learn (arXiv 2610.02749,
the hardness construction; seeds 000/001). This module holds the construction and its exact
pieces; the learning experiments build on it.

- Queries: keyword indicators q in {0,1}^P, each keyword present independently with
  probability 1/2 (uniform over the cube; ``sample_queries``).
- Corpus: the n = 2^d vertices of {-1,+1}^d (``hypercube``), d = Theta(log P) by the config's
  rule ``d = a * ceil(log2 P) + b`` (``dimension``).
- Hidden intent: a random A in GF(2)^{d x P}; the query's center is c = A q mod 2 and its gold
  set the Hamming ball of radius rho around c, so k = sum_{r <= rho} C(d, r).
- Perfect encoder: e(q) = 2c - 1 in {-1,+1}^d scores document x by <e, x> = d - 2 H(c, x) (H:
  Hamming distance between c and x's bits), so inner-product top-k is exactly the Hamming ball:
  every document in the ball scores >= d - 2 rho, every other <= d - 2 (rho + 1). Each center
  bit is a parity of s_j = sum_i A_ji q_i in {0..m_j}, m_j = |supp A_j|, and parity is the
  triangle wave f(s) = ReLU(s) + sum_{t=1}^{m_j - 1} (-1)^t 2 ReLU(s - t) on the integers, so one
  hidden ReLU layer with m_j units per bit computes e exactly (``perfect_encoder``).
- Chance agreement: for two intents A, A', Pr_q[A q = A' q] = 2^{-rank(A - A')} over GF(2)
  (``gf2_rank``, ``chance_agreement``).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

import numpy as np

from .config import section_defaults
from .evaluate import write_rows
from .finetune import infonce_loss
from .io import write_json
from .probe import ProbeConfig, probe
from .retrieval import rank_gold
from .training import Convergence

log = logging.getLogger(__name__)

_D = section_defaults("hardness")  # the schema holds every default (capgap.config)


def dimension(P: int, a: int = _D["d_rule"]["a"], b: int = _D["d_rule"]["b"]) -> int:
    """Code length d = a * ceil(log2 P) + b (>= 1) for P keywords: d = Theta(log P)."""
    if P < 1 or a < 0:
        raise ValueError("dimension: need P >= 1 and a >= 0")
    return max(1, a * math.ceil(math.log2(P)) + b)


def hypercube(d: int) -> np.ndarray:
    """The corpus: all 2^d vertices of {-1,+1}^d as ``(2^d, d) float32``; row i is the binary
    expansion of i (most significant bit first), bit 1 -> +1, bit 0 -> -1."""
    if not 1 <= d <= 24:
        raise ValueError(f"hypercube: d={d} outside 1..24 (2^d documents)")
    bits = (np.arange(2**d)[:, None] >> np.arange(d - 1, -1, -1)[None, :]) & 1
    return (2 * bits - 1).astype(np.float32)


def ball_size(d: int, rho: int) -> int:
    """k = |Hamming ball of radius rho in {0,1}^d| = sum_{r <= rho} C(d, r)."""
    return sum(math.comb(d, r) for r in range(min(rho, d) + 1))


@dataclass(frozen=True)
class ParityTask:
    """One intent: ``A`` ``(d, P) uint8`` over GF(2) and the gold-ball radius ``rho``."""

    A: np.ndarray
    rho: int

    @property
    def d(self) -> int:
        return self.A.shape[0]

    @property
    def P(self) -> int:
        return self.A.shape[1]

    @property
    def k(self) -> int:
        return ball_size(self.d, self.rho)

    def centers(self, q: np.ndarray) -> np.ndarray:
        """c = A q mod 2 for queries ``(n, P)`` in {0,1}: ``(n, d) uint8``."""
        return (np.asarray(q, dtype=np.int64) @ self.A.T.astype(np.int64) % 2).astype(np.uint8)

    def gold(self, q: np.ndarray) -> list[np.ndarray]:
        """Gold document indices per query (rows of ``hypercube(d)``): the Hamming ball of radius
        rho around the query's center, each sorted ascending."""
        docs = (hypercube(self.d) > 0).astype(np.uint8)
        dist = (self.centers(q)[:, None, :] != docs[None, :, :]).sum(axis=2)
        return [np.flatnonzero(row <= self.rho) for row in dist]


def make_task(P: int, d: int, rho: int, seed: int = _D["seed"]) -> ParityTask:
    """A uniformly random intent A in GF(2)^{d x P} (seeded)."""
    if rho < 0 or rho > d:
        raise ValueError(f"make_task: rho={rho} outside 0..d={d}")
    rng = np.random.default_rng(seed)
    return ParityTask(rng.integers(0, 2, size=(d, P), dtype=np.uint8), int(rho))


def sample_queries(P: int, m: int, seed: int = _D["seed"]) -> np.ndarray:
    """m queries uniform over {0,1}^P (each keyword present with probability 1/2), seeded:
    ``(m, P) uint8``."""
    return np.random.default_rng(seed).integers(0, 2, size=(m, P), dtype=np.uint8)


@dataclass(frozen=True)
class ReluEncoder:
    """e(q) = W2 ReLU(W1 q + b1) + b2: ``W1 (H, P)``, ``b1 (H,)``, ``W2 (d, H)``, ``b2 (d,)``
    float64. ``hidden`` = H, ``parameters`` = H*P + H + d*H + d."""

    W1: np.ndarray
    b1: np.ndarray
    W2: np.ndarray
    b2: np.ndarray

    @property
    def hidden(self) -> int:
        return self.W1.shape[0]

    @property
    def parameters(self) -> int:
        return self.W1.size + self.b1.size + self.W2.size + self.b2.size

    def __call__(self, q: np.ndarray) -> np.ndarray:
        """Query codes ``(n, d) float64`` for queries ``(n, P)``."""
        h = np.maximum(np.asarray(q, dtype=np.float64) @ self.W1.T + self.b1, 0.0)
        return h @ self.W2.T + self.b2


def perfect_encoder(task: ParityTask) -> ReluEncoder:
    """The explicit one-hidden-layer ReLU network mapping q to 2 (A q mod 2) - 1 exactly.

    Output bit j uses max(1, m_j) hidden units ReLU(s_j - t), t = 0..m_j - 1, with
    s_j = <A_j, q>; output weights 1, -2, +2, -2, ... give the triangle wave (parity of s_j),
    then e_j = 2 f(s_j) - 1. A zero row (m_j = 0) gets one dead unit and e_j = -1. Hidden units:
    sum_j max(1, m_j) <= d P.
    """
    rows_w1, rows_b1, blocks = [], [], []
    for j in range(task.d):
        m = int(task.A[j].sum())
        units = max(1, m)
        for t in range(units):
            rows_w1.append(task.A[j].astype(np.float64))
            rows_b1.append(-float(t))
        coef = [1.0] + [2.0 * (-1) ** t for t in range(1, m)] if m else [0.0]
        blocks.append(coef)
    H = len(rows_w1)
    W2 = np.zeros((task.d, H))
    col = 0
    for j, coef in enumerate(blocks):
        W2[j, col : col + len(coef)] = 2.0 * np.asarray(coef)  # e_j = 2 f - 1
        col += len(coef)
    return ReluEncoder(np.stack(rows_w1), np.asarray(rows_b1), W2, -np.ones(task.d))


def gf2_rank(M: np.ndarray) -> int:
    """Rank of a 0/1 matrix over GF(2) (Gaussian elimination)."""
    M = (np.asarray(M, dtype=np.uint8) % 2).copy()
    rank, rows, cols = 0, M.shape[0], M.shape[1]
    for c in range(cols):
        pivot = next((r for r in range(rank, rows) if M[r, c]), None)
        if pivot is None:
            continue
        M[[rank, pivot]] = M[[pivot, rank]]
        for r in range(rows):
            if r != rank and M[r, c]:
                M[r] ^= M[rank]
        rank += 1
        if rank == rows:
            break
    return rank


def chance_agreement(A: np.ndarray, B: np.ndarray, queries: np.ndarray) -> tuple[float, float]:
    """How often two intent maps agree on random queries: the paper's chance-agreement check
    (arXiv 2610.02749, the parity construction): two different intents A, B agree on q
    exactly when (A - B) q = 0 mod 2, which a uniform q satisfies with probability
    2^{-rank_GF(2)(A - B)}.

    Parameters
    ----------
    A, B : ``(d, P) uint8`` 0/1 intent matrices.
    queries : ``(n, P) uint8`` 0/1 query bit vectors.

    Returns
    -------
    ``(measured, theory)``: the fraction of ``queries`` with ``A q = B q (mod 2)`` and
    ``2^{-rank(A - B)}``, both floats in (0, 1].
    """
    same = ((queries.astype(np.int64) @ ((A.astype(np.int64) - B.astype(np.int64)) % 2).T) % 2 == 0).all(axis=1)
    return float(same.mean()), 2.0 ** (-gf2_rank((A.astype(np.int64) - B.astype(np.int64)) % 2))


def ball_recall_at_k(codes: np.ndarray, gold: list[np.ndarray], d: int) -> np.ndarray:
    """Per-query recall@k, k = |gold|, of inner-product retrieval on ``hypercube(d)`` with query
    codes ``(n, d)``: |gold ranked <= k| / k under capgap's evaluation tie rule (a non-gold
    vertex tied with a gold one ranks first: ``capgap.retrieval.rank_gold``). Returns ``(n,)
    float64``."""
    scores = np.asarray(codes, dtype=np.float64) @ hypercube(d).astype(np.float64).T
    k = len(gold[0])
    return np.array([float(np.mean(rank_gold(s, np.asarray(g)) <= k)) for s, g in zip(scores, gold)])


def train_encoder(
    task: ParityTask,
    q_train: np.ndarray,
    q_heldout: np.ndarray,
    arch: str = "mlp",
    loss: str = "infonce",
    steps: int = _D["steps"],
    lr: float = _D["lr"],
    temperature: float = _D["temperature"],
    width_factor: int = _D["width_factor"],
    seed: int = _D["seed"],
    init: ReluEncoder | None = None,
    eval_every: int = _D["eval_every"],
    tol: float = _D["tol"],
    n_iter_no_change: int = _D["n_iter_no_change"],
) -> dict:
    """Train a query encoder q -> R^d by full-batch Adam on ``q_train`` and measure recall@k
    (arXiv 2610.02749: gradient learners on the parity task; defaults: config ``hardness``).

    ``q_train`` / ``q_heldout``: ``(m, P) uint8`` query bit vectors (``split_parity_queries``);
    ``lr``: Adam learning rate; ``temperature``: InfoNCE tau.

    ``arch``: ``perfect`` (one hidden ReLU layer with exactly ``perfect_encoder(task).hidden``
    units, randomly initialised unless ``init`` is given) or ``mlp`` (one hidden layer,
    ``width_factor`` times as wide). ``loss``: ``infonce`` (capgap.finetune.infonce_loss, form
    ``avg``, over all 2^d documents with the Hamming ball as gold set, temperature
    ``temperature``) or ``regression`` (mean squared error to the code 2c - 1).

    Training stops by the convergence rule (``capgap.training.Convergence(tol,
    n_iter_no_change, steps)``): every ``eval_every`` steps the full-batch objective is
    measured, and once it improved by less than ``tol`` (relative; an InfoNCE objective below 1
    by its absolute change, ``capgap.training.relative_improvement``'s floor) over the last
    ``n_iter_no_change`` measurements the learner has converged; else it stops at ``steps``.

    Returns a dict with train/held-out recall@k (mean), the random baseline k/n, the hidden
    units and parameters of the trained network, ``final_loss`` (the full-batch objective at
    the last measurement) and ``convergence`` (the ``ConvergenceState``). Seeded: same
    arguments, same numbers (CPU). Raises ``ValueError`` for an unknown ``arch`` or ``loss``.
    """
    import torch

    if arch not in ("perfect", "mlp") or loss not in ("infonce", "regression"):
        raise ValueError(f"train_encoder: arch must be perfect|mlp and loss infonce|regression, got {arch!r}, {loss!r}")
    # InfoNCE may fall toward 0 without limit once every ball ranks first: judged absolutely
    # below 1; a squared error's small values still matter: judged relatively (floor 0)
    rule = Convergence(tol, n_iter_no_change, steps, floor=1.0 if loss == "infonce" else 0.0)
    torch.manual_seed(seed)
    H = perfect_encoder(task).hidden * (1 if arch == "perfect" else width_factor)
    net = torch.nn.Sequential(torch.nn.Linear(task.P, H), torch.nn.ReLU(), torch.nn.Linear(H, task.d)).double()
    if init is not None:
        with torch.no_grad():
            net[0].weight.copy_(torch.from_numpy(init.W1))
            net[0].bias.copy_(torch.from_numpy(init.b1))
            net[2].weight.copy_(torch.from_numpy(init.W2))
            net[2].bias.copy_(torch.from_numpy(init.b2))
    X = torch.from_numpy(hypercube(task.d).astype(np.float64))
    qt = torch.from_numpy(q_train.astype(np.float64))
    target = torch.from_numpy(2.0 * task.centers(q_train) - 1)
    gold_mask = torch.zeros((len(q_train), len(X)), dtype=torch.bool)
    for i, g in enumerate(task.gold(q_train)):
        gold_mask[i, torch.from_numpy(g)] = True

    def objective():
        e = net(qt)
        return infonce_loss(e @ X.T, gold_mask, temperature) if loss == "infonce" else torch.mean((e - target) ** 2)

    opt = torch.optim.Adam(net.parameters(), lr=lr)
    objectives, step, converged = [], 0, False
    while step < steps and not converged:
        obj = objective()
        opt.zero_grad()
        obj.backward()
        opt.step()
        step += 1
        if step % eval_every == 0 or step == steps:
            with torch.no_grad():
                objectives.append(float(objective()))
            converged = rule.converged(objectives)
    state = rule.state(objectives, step, converged)
    if not state.converged:
        log.warning(
            "hardness: P = %d, %s %s encoder (seed %d): not converged: %s (tol %g over %d checks)",
            task.P,
            arch,
            loss,
            seed,
            state.describe(),
            tol,
            n_iter_no_change,
        )
    with torch.no_grad():
        codes_tr = net(qt).numpy()
        codes_ho = net(torch.from_numpy(q_heldout.astype(np.float64))).numpy()
    return {
        "train_recall": float(ball_recall_at_k(codes_tr, task.gold(q_train), task.d).mean()),
        "heldout_recall": float(ball_recall_at_k(codes_ho, task.gold(q_heldout), task.d).mean()),
        "random_baseline": task.k / 2**task.d,
        "hidden": H,
        "parameters": sum(p.numel() for p in net.parameters()),
        "final_loss": state.objective,
        "convergence": state,
    }


def split_parity_queries(P: int, m_train: int, m_heldout: int, seed: int = _D["seed"]) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint train and held-out queries, uniform over {0,1}^P without replacement (seeded).
    When 2^P < m_train + m_heldout the whole cube is split in the same proportion."""
    rng = np.random.default_rng(seed)
    total = m_train + m_heldout
    if P <= 24 and 2**P <= 4 * total:
        ids = rng.permutation(2**P)[: min(total, 2**P)]
        q = ((ids[:, None] >> np.arange(P)[None, :]) & 1).astype(np.uint8)
    else:  # sample bit vectors and drop repeats (rare at this size)
        q = np.unique(rng.integers(0, 2, size=(2 * total, P), dtype=np.uint8), axis=0)
        q = q[rng.permutation(len(q))][:total]
    cut = round(len(q) * m_train / total)
    return q[:cut], q[cut:]


def sizes(P: int, d: int, rho: int) -> dict:
    """The construction's sizes (arXiv 2610.02749, the parity construction): n = 2^d documents,
    k = |ball|, k/n (the random baseline), log2 of the intent family (d*P bits of A), and the SQ
    lower bound's order as the paper states it (2^Omega(P) statistical queries to beat k/n by an
    inverse-polynomial margin)."""
    k = ball_size(d, rho)
    return {
        "P": P,
        "d": d,
        "n": 2**d,
        "k": k,
        "k_over_n": k / 2**d,
        "log2_intents": d * P,
        "sq_lower_bound": "2^Omega(P)",
    }


def run_grid(cfg: dict, probe_cfg=None) -> tuple[list[dict], dict]:
    """The hardness experiments of one config section (documented in the config schema).

    Returns ``(rows, summary)``: tidy rows for results.csv (dataset ``parity-P{P}``; method
    ``perfect`` (the explicit encoder), ``probe`` (capacity probe on the hypercube index, one
    query per distinct gold ball), ``trained`` (encoder ``{arch}-{loss}`` at ``m_train``
    queries, and ``{arch}-{loss}-m{m}`` for the sweep over training-set sizes) and
    ``random`` (k/n), and with ``ladder`` the learnability ladder's rungs ``head-mlp-all`` (the
    mlp fit on train and held-out queries together; splits train, held-out, all) and
    ``head-mlp`` (the mlp-infonce learner of train queries); metric ``recall`` at k = |ball|;
    every trained learner also gets its convergence state, ``capgap.training.STATE_METRICS``)
    and a summary with the sizes table,
    the chance-agreement measurements and the perfect encoders' sizes. ``probe_cfg``: a
    ``capgap.probe.ProbeConfig`` (default: the schema's probe settings, as in the DAG).
    """
    cfg = {**_D, **dict(cfg)}
    seed = int(cfg["seed"])
    rho = int(cfg["rho"])
    rows, table, chance = [], [], []
    learner = dict(
        steps=int(cfg["steps"]),
        lr=float(cfg["lr"]),
        temperature=float(cfg["temperature"]),
        width_factor=int(cfg["width_factor"]),
        seed=seed,
        eval_every=int(cfg["eval_every"]),
        tol=float(cfg["tol"]),
        n_iter_no_change=int(cfg["n_iter_no_change"]),
    )

    def row(ds, enc, method, split, metric, k, value):
        rows.append(
            {
                "dataset": ds,
                "encoder": enc,
                "method": method,
                "split": split,
                "metric": metric,
                "k": k,
                "value": float(value),
            }
        )

    def train_rows(task, ds, tr, ho, enc_name, arch, loss):
        out = train_encoder(task, tr, ho, arch=arch, loss=loss, **learner)
        row(ds, enc_name, "trained", "train", "recall", task.k, out["train_recall"])
        row(ds, enc_name, "trained", "heldout", "recall", task.k, out["heldout_recall"])
        row(ds, enc_name, "trained", "train", "n_queries", "", len(tr))
        rows.extend(out["convergence"].rows(ds, enc_name, "trained"))
        return out

    def ladder_rows(task, ds, tr, ho, train_only):
        """The learnability ladder's rungs on the parity task (issue 29): the one-hidden-layer
        ReLU family (``mlp``, InfoNCE: the perfect encoder's family) fit on every query, train
        and held-out (``head-mlp-all``: what one shared encoder of the family fits), and the
        same learner on train queries only (``head-mlp``: the ``mlp-infonce`` run itself)."""
        # "train": all queries
        fit = train_encoder(task, np.concatenate([tr, ho]), ho, arch="mlp", loss="infonce", **learner)
        only = (
            train_only if train_only is not None else train_encoder(task, tr, ho, arch="mlp", loss="infonce", **learner)
        )
        # fit-all: every query was fitted; its held-out rows are the held-out queries' fit (not a generalisation
        # result); the train queries' mean from the means over all and over held-out (the splits are disjoint)
        n_tr, n_ho = len(tr), len(ho)
        row(ds, "", "head-mlp-all", "all", "recall", task.k, fit["train_recall"])
        row(
            ds,
            "",
            "head-mlp-all",
            "train",
            "recall",
            task.k,
            ((n_tr + n_ho) * fit["train_recall"] - n_ho * fit["heldout_recall"]) / n_tr,
        )
        row(ds, "", "head-mlp-all", "heldout", "recall", task.k, fit["heldout_recall"])
        row(ds, "", "head-mlp", "train", "recall", task.k, only["train_recall"])
        row(ds, "", "head-mlp", "heldout", "recall", task.k, only["heldout_recall"])
        rows.extend(fit["convergence"].rows(ds, "", "head-mlp-all"))
        rows.extend(only["convergence"].rows(ds, "", "head-mlp"))

    sweep = cfg.get("m_sweep") or {}
    for P in cfg["P"]:
        d = dimension(P, **cfg["d_rule"])
        task = make_task(P, d, rho, seed + P)
        ds = f"parity-P{P}"
        tr, ho = split_parity_queries(P, int(cfg["m_train"]), int(cfg["m_heldout"]), seed + P)
        enc = perfect_encoder(task)
        for split, q in (("train", tr), ("heldout", ho)):
            row(ds, "", "perfect", split, "recall", task.k, ball_recall_at_k(enc(q), task.gold(q), d).mean())
            row(ds, "", "random", split, "recall", task.k, task.k / 2**d)
        # the probe: one query per distinct gold ball (a ball is decided by its center)
        centers = np.unique(task.centers(np.concatenate([tr, ho])), axis=0)
        X = hypercube(d) / np.sqrt(d, dtype=np.float32)
        docs = (hypercube(d) > 0).astype(np.uint8)
        balls = [np.flatnonzero((docs != c).sum(axis=1) <= rho) for c in centers]
        res = probe(X.astype(np.float32), balls, **(probe_cfg or ProbeConfig()).kwargs())
        row(ds, "", "probe", "all", "recall", task.k, np.mean([r.recall_at(task.k) for r in res]))
        row(ds, "", "probe", "all", "certified", "", np.mean([r.certified for r in res]))
        trained = {}
        for arch in cfg["archs"]:
            for loss in cfg["losses"]:
                trained[(arch, loss)] = train_rows(task, ds, tr, ho, f"{arch}-{loss}", arch, loss)
        if cfg["ladder"]:
            ladder_rows(task, ds, tr, ho, trained.get(("mlp", "infonce")))
        if sweep and P == sweep.get("P"):
            pool, ho_s = split_parity_queries(P, max(sweep["m"]), int(cfg["m_heldout"]), seed + P + 1)
            for m in sweep["m"]:
                train_rows(task, ds, pool[:m], ho_s, f"mlp-infonce-m{m}", "mlp", "infonce")
        rng = np.random.default_rng(seed + 7 * P)
        qs = sample_queries(P, int(cfg["chance_queries"]), seed + 11 * P)
        for _ in range(int(cfg["chance_pairs"])):
            A = rng.integers(0, 2, size=(d, P), dtype=np.uint8)
            B = rng.integers(0, 2, size=(d, P), dtype=np.uint8)
            measured, theory = chance_agreement(A, B, qs)
            chance.append({"P": P, "d": d, "measured": measured, "theory": theory})
        table.append(
            {
                **sizes(P, d, rho),
                "perfect_hidden": enc.hidden,
                "perfect_parameters": enc.parameters,
                "n_train": len(tr),
                "n_heldout": len(ho),
                "probe_balls": len(balls),
            }
        )
    return rows, {"sizes": table, "chance_agreement": chance}


def hardness_stage(inputs, outputs, params, threads: int = 1) -> list[dict]:
    """Rule ``hardness`` (``stage(inputs, outputs, params, threads)``, see ``capgap.stages``):
    the parity-task experiments (``run_grid``, settings ``params.hardness``, probe settings
    ``params.probe``): rows to ``outputs.metrics`` (the results.csv columns), sizes and chance
    agreement to ``outputs.summary`` (JSON)."""
    t = time.perf_counter()
    rows, summary = run_grid(params.hardness, ProbeConfig.from_config(params.probe))
    log.info("hardness: %d rows in %.1f s", len(rows), time.perf_counter() - t)
    write_json(outputs.summary, summary)
    write_rows(outputs.metrics, rows)
    return rows
