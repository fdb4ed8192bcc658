"""The probe's internal constants, in one place.

Every module of ``capgap.probe`` reads them at call time as ``constants.NAME``, so a test or a
benchmark that sets ``capgap.probe.constants.NAME`` (``monkeypatch.setattr``) changes what the
next ``probe()`` call does, in worker processes too (they are forked after the change).
"""

PRUNE_AFTER = 5  # consecutive re-solves a cutting plane may stay inactive (alpha = 0); one more and it is dropped
# working sets up to this many planes keep their dual QP's constraint matrices (planes._qp_constraints)
QP_CACHE_MAX = 64
GEMV_ROWS = 10  # fewer active queries than this: their products are matrix-vector products (planes._scores32)
# a small index's batch window may hold this much in its two float32 work matrices (solver.batch_window)
WORK_BYTES = 64 * 2**20
# a batch holds up to this many windows of problems; a finished problem's place goes to the next (batch._solve_batch)
STREAM_WINDOWS = 4
MIN_BATCHES = 8  # batch_size=None: at least this many batches where the problems allow (solver._probe)
# an index of at most this many bytes gets a column-major copy for the cutting plane's products (setup.transposed)
TRANSPOSED_BYTES = 2**30
BLOCK = 512  # rows of the index per temporary copy (NaN check, float64 casts)
HULL_TOL = 1e-9  # hull_distance_bound below this x max|d| proves that no w certifies (the certificate's threshold)
# column-generation rounds of an inseparability proof (proofs._prove_inseparable) or an order witness
# (proofs.order_witness)
HULL_ROUNDS = 10
# non-gold candidates added per round: dim + 2, and at least this many (2 (dim + 2) cost 1.6x the NNLS time)
HULL_STEP = 256
# ... and at most this many (a basic solution has dim + 2 documents; at 2,560 dimensions a first round of 2,562 columns
# took 92% of a screened query's time, and 770 columns halved the BRIGHT-like set's time, the same verdicts)
HULL_STEP_MAX = 770
# secant steps of a line search after its point at the working set's minimiser (batch._line_search)
LINE_SEARCH_STEPS = 2
# the new cutting plane at w_best + CUT_MU (w - w_best): OCAS's mu (Franc & Sonnenburg, JMLR 2009); 0 can repeat a plane
CUT_MU = 0.1
# certificate mode: C escalates from the base C at this x eps (batch._step; NFCorpus: -7% iterations)
BASE_EPS_FACTOR = 10.0
HULL_AFTER = 2  # escalations of C before the one in-loop inseparability proof (C = 100 x the base C by default)
TIGHTEN_STEPS = 3  # certificate mode at C_max, unseparated: eps is tightened 10x at a time, at most this often
TIGHTEN_ITERS = 300  # ... and for at most this many iterations
# HiGHS simplex iterations per exact LP, at most, per row and variable (deterministic: beyond it, undecided)
LP_ITERS = 10
# seconds per exact LP, or per query's constraint generation in all: a backstop against a hung solver (warned:
# load-dependent)
LP_TIME_LIMIT = 3600.0
LP_ROUNDS = 30  # constraint-generation rounds of the hard-margin LP beyond lp_check_max_docs (proofs._lp_generated)
LP_ROUNDS_BEFORE_WHOLE = 4  # ... on corpora small enough for the whole LP, which then follows
LP_WHOLE_FACTOR = 10  # _lp_generated falls back to the whole LP on corpora up to this x lp_check_max_docs
REFINE_MAX_ITER = 300  # iterations of a duplicate query's second, graded solve (refine.refine_duplicates)
# probe(): an index whose largest row norm is below this is probed scaled by a power of two (solver.power_of_two_scale)
SCALE_LOW = 2.0**-16
# ... and above this (at norm 1e15 the float32 products and the proofs' tolerances broke: a wrong "geometry" proof)
SCALE_HIGH = 2.0**32
SCREEN_MIN_DOCS = 50_000  # probe(): an index of more documents is probed by screening (screen module docstring)
SCREEN_CANDIDATES = 2048  # non-gold candidates per query at the start, and at most this many joining per round (screen)
SCREEN_ROUNDS = 8  # rounds of a query's candidates before the whole-index probe takes it (screen)
SCREEN_MAX_DOCS = 65_536  # ... or once its candidates would pass this many documents
SCREEN_MAX_GOLD = 64  # a query with more gold documents than this takes the whole-index probe at once (screen)
SCREEN_SCORE_BYTES = 512 * 2**20  # the (n_docs, chunk) float32 score matrix of a chunk of queries, at most (screen)
SCREEN_BLOCK = 65_536  # index rows per block of screening's passes
