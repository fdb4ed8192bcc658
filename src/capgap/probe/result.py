"""One query's probe outcome: ``ProbeResult`` and the outcomes a query can end with."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

OUTCOMES = ("certified", "duplicate", "geometry", "tied", "undecided")  # ProbeResult.outcome


@dataclass
class ProbeResult:
    """One query's probe outcome.

    ``w``: ``(dim,) float64`` the optimised query vector; ``objective``: primal value at w;
    ``dual``: the dual bound (objective - dual = gap >= 0); ``slack``: pair-averaged hinge loss
    at w (xi); ``iterations``; ``converged`` (False: iteration cap hit); ``margin``: min gold
    score - max non-gold score at w (float64; > 0 means certified); ``certified``;
    ``lp_feasible`` (the exact hard-margin LP's verdict: None when it was not run or stayed
    undecided; False, without an LP, for a query whose gold document has an identical non-gold
    copy: no w separates the two, by construction); ``gold_ranks``: pessimistic 1-based rank of
    each gold document (``capgap.retrieval.rank_gold``), in ascending row order (the query's
    gold rows sorted and deduplicated, not the order they were passed in);
    ``duplicate_conflict``: a gold document has an identical non-gold copy (no w can separate
    them); ``cause``: why an uncertified query is uncertified: ``"duplicate"`` (such a twin, and
    no proof that the gold set is inseparable even with the copies set aside), ``"tied"`` (a
    query with identical text needs a crossing ranking, see ``probe(tie_groups=...)``),
    ``"geometry"`` (the index itself) or ``"solver"`` (the dual QP failed numerically: nothing
    was proven), None when certified; ``tied``: how many queries share this w (1: none);
    ``by_construction``: why certification was guaranteed before any optimisation (n_docs <= dim
    + 1 with affinely independent documents, or a single gold document among distinct documents
    of equal norm), else None; ``top_rows``/``top_scores``: ``(depth,) int64 / float64`` the
    first documents of w's ranking (with ``probe(depth=...)``). ``margin`` is in unnormalised
    score units (it scales with |w|); ``inf`` when no document is non-gold. ``stopped``: why the
    cutting plane stopped, i.e. what ``objective``/``slack``/``dual`` describe: ``"optimum"``
    (Joachims' eps criterion: the SVM optimum within C*eps), ``"certificate"``
    (``solve="certificate"``: the witness separated the gold set; objective and slack are the
    witness's), ``"inseparable"`` (the optimum at C, where ``hull_distance_bound`` or the
    in-loop exact LP proved that no w separates the gold set, so C was not escalated further;
    ``extra["hull"]`` holds the proof's bound, None for the LP), ``"solver"`` (the dual QP
    failed: w is the best point reached, and no proof is taken) or ``"max_iter"``. ``outcome``:
    how the query was decided (issue: every query decided): ``"certified"``; ``"duplicate"``
    (certified up to identical copies: w ranks every gold document above every non-gold one
    except the gold documents' identical copies, which tie with them under any w, so recall@k is
    the best any w reaches for every k >= |gold| + |copies| and, with the tie rule, a lower
    bound below it); ``"geometry"`` (no w separates the gold set, even with the copies set
    aside: proven by ``hull_distance_bound`` or by the exact LP); ``"tied"`` (a text-tied group
    with crossing gold sets: no shared w can rank both); ``"undecided"`` (neither a witness nor
    a proof was found, e.g. the LP off or past its time limit). ``decided_by``:
    ``"certificate"`` (the witness itself), ``"lp"``, ``"hull"``, ``"construction"`` or None
    (undecided).
    """

    w: np.ndarray
    objective: float
    dual: float
    slack: float
    iterations: int
    converged: bool
    margin: float
    certified: bool
    gold_ranks: np.ndarray
    lp_feasible: bool | None = None
    duplicate_conflict: bool = False
    extra: dict = field(default_factory=dict)
    cause: str | None = None
    tied: int = 1
    by_construction: str | None = None
    top_rows: np.ndarray | None = None
    top_scores: np.ndarray | None = None
    stopped: str = "optimum"
    outcome: str = "undecided"
    decided_by: str | None = None

    @property
    def gap(self) -> float:
        """``objective - dual`` (>= 0): how far the dual bound certifies the objective."""
        return self.objective - self.dual

    def recall_at(self, k: int) -> float:
        """|top-k ∩ gold| / |gold| with pessimistic ties."""
        return float(np.mean(self.gold_ranks <= k))
