"""The capacity probe: a per-query ranking SVM solved by Joachims' cutting-plane method,
with OCAS's line search (Franc & Sonnenburg).

For one query with gold set G and non-gold set N over the frozen index D ``(n_docs, dim)``,
the probe optimises a query vector w directly (arXiv 2610.02749, "The empirical half"):

    min_w  1/2 |w|^2 + C * xi
    s.t.   for every c in {0,1}^P:  (1/|P|) sum_{(i,j) in P} c_ij w.(d_i - d_j)
                                        >= (1/|P|) sum c_ij - xi,        xi >= 0,

with P = G x N the gold/non-gold pairs: the 1-slack structural form of the ranking SVM
(Joachims, "Training Linear SVMs in Linear Time", KDD 2006, Sec. 4 and Alg. 2). At the optimum
xi = (1/|P|) sum_pairs max(0, 1 - w.(d_i - d_j)), so the objective is

    1/2 |w|^2 + (C/|P|) * sum_pairs hinge,

i.e. **C is per pair-averaged loss, exactly dlib's ``svm_rank_trainer`` scaling** (dlib
multiplies C by 1/number-of-pairs). Equation 12 of Joachims' 2002 ranking-SVM paper uses
C' = C/|P| per pair.

Cutting plane. The most violated constraint at w has c_ij = 1 iff s_j > s_i - 1 with
s = D.w. It is found without the |G|x|N| pairs: sort the gold scores, and for each document
j count n_j = #{i in G : s_i < s_j + 1} by binary search (``searchsorted``); the count
m_i = #{j in N : s_j > s_i - 1} of each gold document follows from a histogram of the n_j.
The constraint is then one weighted sum over documents, a = D^T coef / |P| with coef_i = m_i
(gold) and coef_j = -n_j (non-gold), b = sum m_i / |P|. Per iteration and batch of B queries
the cost is one (n_docs x dim).(dim x B) product for the scores, one (dim x n_docs).(n_docs x B)
product for the new constraints, and O(n_docs log |G|) counting per query.

The restricted QP over the working set W is solved in its dual,
    max_alpha  b^T alpha - 1/2 alpha^T K alpha,  alpha >= 0,  sum alpha <= C,  K = A^T A,
    w = A alpha,
with ``quadprog`` (Goldfarb-Idnani dual active set: exact for small dense strictly convex QPs;
|W| is the iteration count, so each solve is tens of microseconds; a 1e-10 relative ridge
keeps K positive definite when cutting planes are linearly dependent).

Line search (OCAS: Franc & Sonnenburg, "Optimized Cutting Plane Algorithm for Large-Scale
Risk Minimization", JMLR 10, 2009, Sec. 3). The working set's minimiser w_W = A alpha jumps
between iterations when C is large (the plain cutting plane needs O(C / eps) of them); so the
probe also keeps the best point w_b, the lowest objective F(w) = 1/2 |w|^2 + C R(w) found
(R the pair-averaged hinge), moves it to the lowest F on the segment from w_b to w_W (R is
convex and piecewise linear along it, its slope at a point the most violated constraint's
coefficients there; w_W itself first, then at most ``LINE_SEARCH_STEPS`` secant steps; the
segment only, so w_b's scores stay a convex combination of exact products), and takes the new
cutting plane at w_b + mu (w_W - w_b), mu = ``CUT_MU`` = 0.1, as OCAS does (at w_W itself where
w_b did not move: a cut near a w_b that stands still can repeat a plane). On NFCorpus this cut
the iterations 3.5x (benchmarks/README.md). The certificate is checked at w_W and at w_b.

Stopping (Franc & Sonnenburg's criterion; Joachims' where w_b = w_W): the objective at w_b
exceeds the working set's lower bound at w_W by at most C * eps,
F(w_b) - (1/2 |w_W|^2 + C xi_W) <= C * eps; with w_b = w_W this is Joachims' H(w) = b - w.a
<= xi_W + eps. Then primal - dual <= C * eps, and w_b is the w a query ends with (unless
certified at w_W). ``eps`` is in the units of the pair-averaged hinge loss (default 1e-3).

Certificate. A query is *certified* when a witness w ranks every gold document strictly above
every non-gold one (checked in float64: then the hard-margin problem
{w, t : w.d_i >= t + 1 (i in G), w.d_j <= t (j in N)} is feasible after scaling w).
Zero slack implies it. ``lp_feasible`` decides the hard-margin problem exactly as an LP with
|G| + |N| constraints (scipy's HiGHS); the probe runs it for queries the cutting plane does not
certify: whole on a corpus of at most ``lp_check_max_docs`` documents, by constraint generation
on a larger one (the gold documents against the non-gold documents the witness ranks highest,
growing by the documents a subset's LP witness misranks, until that witness separates every
document or a subset is infeasible), with a gold document's identical non-gold copies set
aside; it runs after escalation and only a separating witness replaces w, so the LP never
makes a bound looser. On larger corpora, a query still unseparated after ``HULL_AFTER``
escalations of C gets one inseparability proof: the gold and non-gold
convex hulls intersect (``hull_distance_bound``: convex combinations of the gold documents and
of the non-gold documents that score highest at w, found by non-negative least squares, whose
difference r is computed exactly; any w then has min gold score - max non-gold score <=
w.r <= |w| |r|). With |r| below the certificate's threshold no w can certify the query and C
stays where it is. Recall@k of the probe uses pessimistic ties (a
non-gold document with the same score ranks first), so it stays a lower bound on capacity.

Modules (one per stage):

- ``config``: ``ProbeConfig`` (the schema's defaults), ``SOLVES``, ``PAIRS``;
- ``constants``: the internal constants (``HULL_AFTER``, ``GEMV_ROWS``, ...), read at call
  time: patch them there (``capgap.probe.constants.HULL_AFTER``);
- ``result``: ``ProbeResult``, ``OUTCOMES``;
- ``solver``: ``probe`` (validation, batches); ``setup``: the shared environment (queries,
  duplicates and twins, problems, grade levels); ``state``: ``_Env`` and a problem's
  cutting-plane state ``Problem``; ``batch``: the cutting-plane loop over one batch;
  ``workers``: batches in worker processes; ``planes``: the most violated constraint, the
  hinge, the dual QP, the index products;
- ``proofs``: ``lp_feasible``, ``hull_distance_bound`` and the constraint / column generation
  around them; ``ties``: the text-tie rule; ``finish``: a problem's verdict and results;
- ``records``: ``per_query_records``, ``summary_rows``, ``evaluate`` (= ``probe_arguments``, then
  ``probe()``, then ``evaluate_results``), ``twin_margins``;
- ``shards``: the probe scattered over shards of whole batches and gathered to the same
  results (``probe_shard``, ``gather_shards``; config ``probe.shards``);
- ``screen``: an index of more than ``SCREEN_MIN_DOCS`` documents, each query solved on its
  candidate documents and checked against the whole index (``probe()`` chooses it; the
  shards keep the whole-index path).

Every public name is re-exported here (``from capgap.probe import probe, ProbeConfig``).
"""

from .config import PAIRS, SOLVES, ProbeConfig
from .proofs import hull_distance_bound, lp_feasible
from .records import evaluate, evaluate_results, per_query_records, probe_arguments, summary_rows, twin_margins
from .result import OUTCOMES, ProbeResult
from .solver import probe

__all__ = [
    "OUTCOMES", "PAIRS", "SOLVES", "ProbeConfig", "ProbeResult", "evaluate", "hull_distance_bound", "lp_feasible",
    "evaluate_results", "per_query_records", "probe", "probe_arguments", "summary_rows", "twin_margins",
]
