"""The diagnosis: per query, the probe on the index's own vectors (and on the uncompressed ones),
exact search with the user's query embedding and the user's ANN run -> a verdict
(``capgap.diagnosis`` module docstring).

``diagnose`` runs in stages that share a ``_Case`` (the checked matrices and ids, the judged
query rows, the notes) and a ``_Scoring`` (the scoring matrices and each query's gold
documents): ``_checked_matrices`` and ``_judged`` (the checks), ``_set_apart_zero_norm``
(cosine), ``_score``, ``_probe_both`` (``_Geometry`` per matrix), ``_query_row`` per query
and ``_summary_extra``. ``admitted_but_missed`` applies the encoder-limited verdict to the
DAG's probe rows and runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from ..errors import DataFormatError
from ..probe import ProbeConfig, probe
from ..retrieval import dense_scores, duplicate_groups, rank_queries
from .geometry import certified_ranks, index_limit_proof, l2_feasible
from .inputs import METRICS, validate_matrix
from .prepare import _match_queries, _note, _run_mismatch, _score_scales, _scoring_matrix, _zero_norm_rows
from .summary import _capped_recall, _summary, _summary_extra


@dataclass
class Diagnosis:
    """Per-query rows (dicts) and the summary dict of one ``diagnose`` call."""

    rows: list[dict]
    summary: dict
    k: int
    notes: list[str] = field(default_factory=list)


@dataclass
class _Case:
    """What the stages of ``diagnose`` share about its inputs, once checked."""

    D: np.ndarray  # (n_docs, dim) the documents, less any row set apart (zero norm)
    Q: np.ndarray  # (n_queries, dim) every query row
    U: np.ndarray | None  # (n_docs, dim) the uncompressed documents, row for row with D
    doc_ids: Sequence[str]  # the ids of D's rows
    query_ids: Sequence[str]  # the ids of Q's rows
    qrels: Mapping[str, Mapping[str, int]]
    keep: list[int]  # the judged query rows, in row order
    qids: list[str]  # their ids
    unmatched: dict  # ``_match_queries``'s counts
    pos_all: dict[str, int]  # document id -> row before any is set apart: what the ANN run's ids meet
    notes: list[str]
    zero: dict | None = None  # the zero-norm summary (cosine only)
    score_scale: dict | None = None  # the powers of two the vectors were scored at (``prepare._score_scales``)
    id_defaults: dict | None = None  # how rows were paired with ids where no ids file was given (the CLI's defaults)


@dataclass
class _Scoring:
    """The scoring matrices of one diagnosis (``_scoring_matrix``) and each judged query's gold."""

    Ds: np.ndarray  # (n_docs, dim') float32 documents
    Qs: np.ndarray  # (n_judged, dim') float32 judged queries
    Us: np.ndarray | None  # (n_docs, dim') float32 uncompressed documents
    golds: list[set[str]]  # gold ids (grade > 0); one set apart (zero norm) stays: the denominators
    gold_rows: list[np.ndarray]  # (|gold in D|,) int64 rows of Ds, ascending
    grades: list[np.ndarray]  # (|gold in D|,) float64 their grades
    groups: object  # ``duplicate_groups(Ds)``: bit-identical rows
    kk: int  # min(k, n_docs)


@dataclass
class _Geometry:
    """The probe on one scoring matrix (``_probe_geometry``), per query: the probe's result, the
    gold documents' ranks under its vector, certified, cause; under ``l2`` whether the ranks
    come from an L2 query (``reachable``, else None), the queries whose probe vector ``(w, c)``
    has ``c <= 0`` and whose ranks come from ``w`` alone (``off``) and those an exact LP gave an
    L2 query point instead (``l2_lp``); ``proofs``: why the query cannot be served at k
    (``geometry.index_limit_proof``) or None."""

    results: list
    ranks: list[np.ndarray]
    certified: list[bool]
    causes: list
    reachable: list[bool] | None
    off: list[int]
    l2_lp: list[int] = field(default_factory=list)
    proofs: list = field(default_factory=list)


_SIDE = {"queries": "query", "documents": "document", "uncompressed": "uncompressed document"}


def diagnose(
    D: np.ndarray,
    Q: np.ndarray,
    qrels: Mapping[str, Mapping[str, int]],
    doc_ids: Sequence[str],
    query_ids: Sequence[str],
    k: int = 10,
    ann_run: Mapping[str, Sequence[str]] | None = None,
    metric: str = "ip",
    probe_cfg: Mapping | None = None,
    threads: int | None = None,
    uncompressed: np.ndarray | None = None,
    index_info: Mapping | None = None,
    uncompressed_info: Mapping | None = None,
    zero_norm: str = "error",
    paths: Mapping[str, str] | None = None,
    id_defaults: Mapping[str, Mapping] | None = None,
) -> Diagnosis:
    """Verdict per query: index-limited, compression-limited, encoder-limited, ann-limited or ok
    (module docstring).

    Parameters
    ----------
    D : numpy.ndarray
        ``(n_docs, dim)`` document embeddings as the index stores them (for a compressed faiss
        index its reconstructed vectors, ``load_embeddings``), float16/float32/float64 (scored
        as float32; a memory map is read in place and never written).
    Q : numpy.ndarray
        ``(n_queries, dim)`` query embeddings, same dtypes.
    qrels : mapping
        Query id -> {doc id: grade} (grade > 0 = gold).
    doc_ids, query_ids : sequence of str
        The rows' ids.
    k : int
        The cut-off of every recall and verdict.
    ann_run : mapping, optional
        Query id -> the user's approximate top documents.
    metric : str
        ``ip`` (inner product), ``cosine`` (rows L2-normalised into new arrays; a note says how
        far they were from unit length) or ``l2`` (ranked by ``-|q - d|^2``; the probe runs on
        ``(d, -|d|^2/2)``: module docstring).
    probe_cfg : mapping, optional
        Overrides of the probe's defaults (``capgap.probe.ProbeConfig``: the DAG's).
    threads : int, optional
        BLAS threads.
    uncompressed : numpy.ndarray, optional
        ``(n_docs, dim)``: the same documents at full precision, row for row
        (``match_uncompressed``). The probe also runs on them, scored by the same ``metric``;
        a query the index's own vectors do not admit but these do is **compression-limited**.
    index_info, uncompressed_info : mapping, optional
        What the two matrices are (``Embeddings.info()``: kind, bytes per vector, ...), copied
        into the summary's ``index`` / ``uncompressed``; default: the dtype and
        ``itemsize * dim``.
    zero_norm : str
        Under ``cosine``, what a row of norm 0 (every value 0: its cosine is undefined; a
        non-zero row of any norm is normalised exactly) does: ``"error"`` (default) raises
        ``ValueError`` naming the file and rows; ``"set-apart"`` leaves those rows out and
        counts them (summary ``zero_norm``): a zero document is ranked for no query (a gold one
        stays in its query's gold set, never found, so recall keeps its denominator), a zero
        query gets no verdict, and a query whose every gold document is zero is left out too.
        Ignored under ``ip`` and ``l2`` (a zero vector has well-defined scores there).
    paths : mapping, optional
        The files the matrices came from, keyed ``"documents"``, ``"queries"``,
        ``"uncompressed documents"``, named in errors about their rows (default: those words).
    id_defaults : mapping, optional
        How the caller paired rows with ids where no ids file was given, per side
        (``"queries"``, ``"documents"``, ``"uncompressed"``): ``{"rule": str, "first": [ids of
        rows 0, 1, 2]}`` (None: a row paired with no document), recorded in the summary
        (``id_defaults``) and a note (the CLI's defaults).

    Returns
    -------
    Diagnosis
        Per-query rows and the summary (module docstring).

    Notes
    -----
    Query rows whose id the qrels do not judge are left out, judged queries without a row are
    not evaluated: both are counted in the summary (``rows_without_judgements``,
    ``judged_queries_without_row``) and in a note logged as a warning.

    Raises
    ------
    ValueError
        A matrix that is not 2-d, not floating point, empty, or holds a non-finite value
        (``"documents: row 3 (0-based) is not finite: column 1 holds nan"``; the uncompressed
        matrix is named ``"uncompressed documents"``), a dimension mismatch, ``uncompressed``
        of another shape than ``D``, an unknown metric, id counts that differ from the row
        counts, no query row judged by the qrels (naming ids of both sides), qrels that name
        documents not in ``doc_ids`` (a ``DataFormatError`` naming the file, the first such
        line and field ``corpus-id`` when ``qrels`` is a ``QrelsFile``), a query whose judged
        documents are all non-gold, or, under ``cosine`` with ``zero_norm="error"``, a row of
        norm 0 (``"docs.npy: row 4 (0-based; ids ['d4']) has norm 0 (every value 0): cosine is
        undefined ..."``); under ``l2``, a probe vector that is no L2 query and scores the
        documents beyond float32's range (``"docs.npy: scores overflow float32 under the probe's
        vector for query 'q0' ..."``, the file from ``paths``).
    """
    defaults = [
        f"no {_SIDE.get(side, side)} ids given: {how['rule']} (row 0 = {how['first'][0]!r}"
        + (f", row 1 = {how['first'][1]!r}" if len(how["first"]) > 1 else "")
        + ")"
        for side, how in (id_defaults or {}).items()
    ]
    try:
        case = _judged(*_checked_matrices(D, Q, uncompressed, metric), qrels, doc_ids, query_ids)
    except ValueError as e:
        if defaults:  # the ids the rows were paired with by default are part of what went wrong
            raise ValueError(f"{e} ({'; '.join(defaults)})") from e
        raise
    case.id_defaults = dict(id_defaults) if id_defaults else None
    for msg in defaults:
        _note(case.notes, msg)
    if metric == "cosine":
        _set_apart_zero_norm(case, zero_norm, paths or {})
    try:
        sc = _score(case, metric, k)
    except ValueError as e:  # a matrix refused by side ("documents: row 3 ..."): name its file
        side, sep, rest = str(e).partition(": ")
        if sep and (paths or {}).get(side):
            raise ValueError(f"{paths[side]}: {rest}") from None
        raise
    if ann_run is not None:
        for msg in getattr(ann_run, "notes", ()):  # how load_run_file ordered the run (a RunFile)
            _note(case.notes, msg)
        case.notes += _run_mismatch(ann_run, case.qids, case.pos_all)
    pr, pu = _probe_both(case, sc, metric, threads, probe_cfg, paths or {})
    # the encoder's full ranking under the evaluation tie rule (capgap.retrieval)
    enc_ranks, exact_top, _ = rank_queries(
        dense_scores(sc.Qs, sc.Ds, threads),
        len(case.qids),
        sc.gold_rows,
        sc.grades,
        None,
        sc.kk,
        len(case.doc_ids),
        sc.groups,
    )
    rows, admitted = [], []  # per query: (the index's vectors admit it, the uncompressed vectors do or None)
    for i, er in enumerate(enc_ranks):
        row, adm = _query_row(case, sc, i, er, exact_top[i], pr, pu, k, ann_run)
        rows.append(row)
        admitted.append(adm)
    extra = _summary_extra(case, pr, pu, rows, admitted, k, metric, index_info, uncompressed_info)
    open_q = [r["query_id"] for r in rows if r["verdict"] == "undetermined"]
    if open_q:
        _note(
            case.notes,
            f"{len(open_q)} queries are undetermined: no query vector at hand puts their gold documents in the "
            f"top {k}, and nothing proves that none does, e.g. {open_q[:3]}",
        )
    kind = str(extra["index"].get("kind") or "")
    if kind.startswith(("ivf", "hnsw")) and ann_run is None:
        _note(
            case.notes,
            f"the index is {kind}: the probe and exact search score its reconstructed vectors, as its search "
            "does; which vectors a search visits (IVF lists, HNSW graph) is an approximation judged only with "
            "--ann-run",
        )
    return Diagnosis(rows, _summary(rows, k, ann_run is not None, case.notes, extra), k, case.notes)


def _checked_matrices(D, Q, U, metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``D`` ``(n_docs, dim)``, ``Q`` ``(n_queries, dim)`` and ``U`` ``(n_docs, dim)`` (or None)
    as arrays, each checked (``validate_matrix``), with matching dimensions (``U`` of ``D``'s
    shape); ``ValueError`` for an unknown ``metric``."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {list(METRICS)}, got {metric!r}")
    D, Q = np.asarray(D), np.asarray(Q)
    validate_matrix(D, "documents")
    validate_matrix(Q, "queries")
    if D.shape[1] != Q.shape[1]:
        raise ValueError(f"dimension mismatch: documents {D.shape}, queries {Q.shape}")
    if U is not None:
        U = np.asarray(U)
        validate_matrix(U, "uncompressed documents")
        if U.shape != D.shape:
            raise ValueError(
                f"uncompressed documents have shape {U.shape}, documents {D.shape}: they must be "
                "the same documents, row for row, at the same dimension"
            )
    return D, Q, U


def _judged(
    D: np.ndarray,
    Q: np.ndarray,
    U: np.ndarray | None,
    qrels: Mapping[str, Mapping[str, int]],
    doc_ids: Sequence[str],
    query_ids: Sequence[str],
) -> _Case:
    """The ``_Case`` of checked matrices ``D`` ``(n_docs, dim)``, ``Q`` ``(n_queries, dim)`` and ``U`` (``D``'s shape,
    or None): ids counted against rows, qrels naming only known
    documents, the judged query rows (``_match_queries``), each with a gold document."""
    if len(doc_ids) != D.shape[0]:
        raise ValueError(f"{len(doc_ids)} document ids for {D.shape[0]} document rows")
    if len(query_ids) != Q.shape[0]:
        raise ValueError(f"{len(query_ids)} query ids for {Q.shape[0]} query rows")
    notes: list[str] = []
    pos = {d: i for i, d in enumerate(doc_ids)}
    unknown = sorted({d for q in qrels for d in qrels[q] if d not in pos})
    if unknown:
        msg = (
            f"qrels name {len(unknown)} documents not in the document ids, e.g. {unknown[:3]}; "
            f"the document ids look like {list(doc_ids[:3])}"
        )
        lines = getattr(qrels, "lines", None)  # a QrelsFile (load_qrels_file): name the file and the first such line
        if lines:
            line, q, d = min((n, q, d) for (q, d), n in lines.items() if d not in pos)
            hint = "; a line starting with '#' is a judgement: qrels have no comment lines" if q.startswith("#") else ""
            more = [u for u in unknown if u != d]
            also = f" (nor are {len(more)} more documents the qrels name, e.g. {more[:3]})" if more else ""
            raise DataFormatError(
                qrels.path,
                line,
                "corpus-id",
                f"document {d!r} (query {q!r}) is not in the document ids"
                f"{also}; the document ids look like {list(doc_ids[:3])}{hint}",
            )
        raise ValueError(msg)
    keep, unmatched = _match_queries(query_ids, qrels, notes)
    qids = [query_ids[i] for i in keep]
    empty = [q for q in qids if not any(g > 0 for g in qrels[q].values())]
    if empty:
        raise ValueError(f"{len(empty)} queries have an empty gold set (every judged grade <= 0), e.g. {empty[:3]}")
    return _Case(D, Q, U, doc_ids, query_ids, qrels, keep, qids, unmatched, pos, notes)


def _set_apart_zero_norm(case: _Case, policy: str, paths: Mapping[str, str]) -> None:
    """Under cosine: the rows of norm 0 refused or set apart (``_zero_norm_rows``), in ``case``."""
    case.D, case.U, case.doc_ids, case.keep, case.zero = _zero_norm_rows(
        case.D, case.Q, case.U, case.doc_ids, case.query_ids, case.keep, case.qrels, policy, paths, case.notes
    )
    case.qids = [case.query_ids[i] for i in case.keep]


def _score(case: _Case, metric: str, k: int) -> _Scoring:
    """The scoring matrices (a note for each that was not unit length under cosine) and each
    judged query's gold documents, rows and grades."""
    Qk = case.Q[case.keep]
    sd, sq = _score_scales(case.D, Qk, case.U, metric, case.notes)
    case.score_scale = {"documents": sd, "queries": sq}
    Ds, dev_d = _scoring_matrix(case.D, metric, "documents", sd)
    Qs, dev_q = _scoring_matrix(Qk, metric, "queries", sq)
    Us, dev_u = _scoring_matrix(case.U, metric, "uncompressed documents", sd) if case.U is not None else (None, 0.0)
    for name, dev in (("documents", dev_d), ("queries", dev_q), ("uncompressed documents", dev_u)):
        if dev > 1e-3:
            _note(
                case.notes, f"metric cosine: {name} were not unit length (max |norm - 1| = {dev:.3g}); normalised them"
            )
    pos = {d: i for i, d in enumerate(case.doc_ids)}
    golds = [{d for d, g in case.qrels[q].items() if g > 0} for q in case.qids]
    # a gold document set apart (zero norm) stays in ``golds`` (the denominators) but has no row
    gold_rows = [np.array(sorted(pos[d] for d in g if d in pos), dtype=np.int64) for g in golds]
    grades = [
        np.array([case.qrels[q][case.doc_ids[r]] for r in g], dtype=np.float64) for q, g in zip(case.qids, gold_rows)
    ]
    groups = duplicate_groups(Ds)  # bit-identical rows; under l2 the same groups as D's
    # no text ties here: equal query embeddings need not mean equal texts, and another encoder
    # could tell them apart, so each query keeps its own w
    return _Scoring(Ds, Qs, Us, golds, gold_rows, grades, groups, min(k, len(case.doc_ids)))


class _ProbeOverflow(ValueError):
    """The probe's vector for judged query ``query`` (an index into the judged queries) scores the
    documents beyond float32's range (``_probe_geometry``; ``_probe_both`` names the files)."""

    def __init__(self, query: int):
        super().__init__(f"scores overflow float32 under the probe's vector for judged query {query}")
        self.query = query


def _probe_geometry(
    Ds: np.ndarray,
    gold_rows: list,
    grades: list,
    n_golds: list[int],
    metric: str,
    kk: int,
    threads: int | None,
    probe_cfg: Mapping | None,
    groups,
) -> _Geometry:
    """Run the probe on one scoring matrix ``Ds`` ``(n_docs, dim')`` float32 (``_scoring_matrix``).

    Returns the ``_Geometry``: the probe's results, per query the gold documents' ranks under
    the probe's vector, certified and cause; under ``l2`` whether the ranks come from an L2
    query. A probe vector ``(w, c)`` with ``c <= 0`` is no L2 query: its row takes the ranking
    by ``w`` alone, the limit of the L2 queries ``t*w`` as ``t`` grows (strict orders kept, ties
    pessimistic), a lower bound; where that does not serve the query, the exact LP with
    ``c >= 0`` (``geometry.l2_feasible``) gives an L2 query point that ranks the gold set first,
    or proves that none does. ``n_golds``: each query's gold count (the recall denominator's
    |gold|, set-apart documents included). Per query, ``proofs`` says why no query vector (no
    L2 query point) can serve it at ``kk``, or None (``geometry.index_limit_proof``). Raises
    ``_ProbeOverflow`` where such a ``w`` scores ``Ds`` beyond float32's range."""
    cfg = ProbeConfig.from_config(probe_cfg)
    results = probe(Ds, gold_rows, threads=threads, grades=grades, **cfg.kwargs())
    ranks = [res.gold_ranks for res in results]
    certified = [bool(res.certified) for res in results]
    causes = [res.cause for res in results]
    reachable = [bool(res.w[-1] > 0) for res in results] if metric == "l2" else None
    off = [i for i, r in enumerate(reachable) if not r] if reachable is not None else []
    if off:
        # (w, c) with c <= 0 is no L2 query; w alone is the limit of the L2 queries t*w, t -> oo
        with np.errstate(over="ignore"):  # a w beyond float32 is refused below, naming the query
            W = np.stack([results[i].w for i in off]).astype(np.float32)
        W[:, -1] = 0.0
        beyond = np.flatnonzero(~np.isfinite(W).all(axis=1))
        if len(beyond):
            raise _ProbeOverflow(off[int(beyond[0])])
        try:
            f_ranks, _, _ = rank_queries(
                dense_scores(W, Ds, threads),
                len(off),
                [gold_rows[i] for i in off],
                [grades[i] for i in off],
                None,
                kk,
                Ds.shape[0],
                groups,
            )
        except ValueError:  # dense_scores: scores beyond float32
            raise _ProbeOverflow(off[0]) from None
        for i, r in zip(off, f_ranks):
            ranks[i] = r
            certified[i] = bool(r.max() <= len(r))  # pessimistic ranks 1..|G|: every gold strictly first
            causes[i] = None if certified[i] else (results[i].cause or "l2-unreachable")
    l2_lp, proofs = [], [None] * len(results)
    for i, res in enumerate(results):
        need = min(kk, n_golds[i])
        if certified[i] or float(np.sum(ranks[i] <= kk)) >= need:
            continue  # served by the probe's vector (or its limit)
        l2_no = False
        if metric == "l2" and len(gold_rows[i]):
            ok, w = l2_feasible(Ds, gold_rows[i], res.w, groups, cfg.lp_check_max_docs)
            if ok and w is not None:  # an L2 query point ranks the gold set first
                ranks[i] = certified_ranks(Ds, gold_rows[i], grades[i], w, groups)
                certified[i], causes[i], reachable[i] = True, None, True
                l2_lp.append(i)
                continue
            l2_no = ok is False and res.stopped != "solver"  # no proof where the probe's QP failed
            if l2_no and res.outcome == "certified":
                causes[i] = "l2-unreachable"  # separable by (w, c) only with c < 0: farthest documents first
        proofs[i] = index_limit_proof(
            n_golds[i], gold_rows[i], kk, groups, Ds.shape[0], res.outcome == "geometry", l2_no
        )
    off = [i for i in off if i not in l2_lp]
    return _Geometry(results, ranks, certified, causes, reachable, off, l2_lp, proofs)


def _probe_both(
    case: _Case, sc: _Scoring, metric: str, threads: int | None, probe_cfg: Mapping | None, paths: Mapping[str, str]
) -> tuple[_Geometry, _Geometry | None]:
    """The probe on the index's vectors and, when given, on the uncompressed ones; a note where
    its vector is no L2 query (``l2``). Raises ``ValueError`` naming the documents' file
    (``paths``) and the query where the probe's vector scores them beyond float32's range."""
    n = len(case.qids)
    n_golds = [len(g) for g in sc.golds]

    def named(e: _ProbeOverflow, side: str) -> ValueError:
        docs, queries = paths.get(side) or side, paths.get("queries") or "queries"
        scale = (case.score_scale or {}).get("documents", 1.0)
        at = f", the vectors scored times 2^{int(np.log2(scale))}" if scale != 1.0 else ""
        return ValueError(
            f"{docs}: scores overflow float32 under the probe's vector for query {case.qids[e.query]!r} "
            f"(metric {metric}: its w alone){at}: rescale the vectors of {docs} and {queries}, or drop "
            "the rows whose norms lie far from the others'"
        )

    try:
        pr = _probe_geometry(sc.Ds, sc.gold_rows, sc.grades, n_golds, metric, sc.kk, threads, probe_cfg, sc.groups)
    except _ProbeOverflow as e:
        raise named(e, "documents") from None
    if pr.l2_lp:
        _note(
            case.notes,
            f"metric l2: for {len(pr.l2_lp)} of {n} queries the probe's vector was no L2 query and did not "
            f"serve the query; an exact LP found an L2 query point that ranks the gold set first, e.g. "
            f"{[case.qids[i] for i in pr.l2_lp[:3]]}",
        )
    if pr.off:
        _note(
            case.notes,
            f"metric l2: for {len(pr.off)} of {n} queries the probe's vector (w, c) has c <= 0, so it is no "
            f"L2 query; their probe numbers come from w alone (the ranking of the L2 queries t*w as t grows), "
            f"a lower bound, e.g. {[case.qids[i] for i in pr.off[:3]]}",
        )
    failed = [case.qids[i] for i, res in enumerate(pr.results) if res.stopped == "solver"]
    if failed:
        _note(
            case.notes,
            f"the probe's dual QP failed numerically for {len(failed)} of {n} queries (cause 'solver'): "
            f"they are certified only where the point it reached separates their gold set, else "
            f"undetermined: no inseparability proof is taken from it, e.g. {failed[:3]}",
        )
    pu = None
    if sc.Us is not None:
        try:
            pu = _probe_geometry(
                sc.Us, sc.gold_rows, sc.grades, n_golds, metric, sc.kk, threads, probe_cfg, duplicate_groups(sc.Us)
            )
        except _ProbeOverflow as e:
            raise named(e, "uncompressed documents") from None
        if pu.off:
            _note(
                case.notes,
                f"metric l2, uncompressed documents: for {len(pu.off)} of {n} queries the probe's "
                "vector is no L2 query; their uncompressed probe numbers come from w alone, a lower "
                "bound",
            )
    return pr, pu


def _query_row(
    case: _Case,
    sc: _Scoring,
    i: int,
    er: np.ndarray,
    exact_top: np.ndarray,
    pr: _Geometry,
    pu: _Geometry | None,
    k: int,
    ann_run: Mapping[str, Sequence[str]] | None,
) -> tuple[dict, tuple]:
    """The row of judged query ``i`` (its encoder ranks ``er``, exact top ``exact_top``) and
    ``(admitted by the index's vectors, by the uncompressed ones or None)``."""
    q, gold, kk = case.qids[i], sc.golds[i], sc.kk
    probe_r = float(np.sum(pr.ranks[i] <= kk)) / min(kk, len(gold))
    enc_r = float(np.sum(er <= kk)) / min(kk, len(gold))
    row = {"query_id": q, "n_gold": len(gold), f"probe_recall@{k}": round(probe_r, 6), "certified": pr.certified[i]}
    if pr.reachable is not None:
        row["probe_l2_query"] = pr.reachable[i]
    row |= {"cause": pr.causes[i], "slack": pr.results[i].slack}
    unc_admits = None
    if pu is not None:
        unc_r = float(np.sum(pu.ranks[i] <= kk)) / min(kk, len(gold))
        row |= {f"uncompressed_probe_recall@{k}": round(unc_r, 6), "uncompressed_certified": pu.certified[i]}
        unc_admits = pu.certified[i] or unc_r >= 1
    # the capacity: the better of the probe's vector and the user's own query vector, both witnesses
    row |= {
        f"encoder_recall@{k}": round(enc_r, 6),
        f"capacity@{k}": round(max(probe_r, enc_r), 6),
        "best_gold_rank": int(er.min()),
    }
    ann_r = None
    if ann_run is not None:
        ann = list(ann_run.get(q, []))  # a query the run lacks retrieved nothing
        ann_r = _capped_recall(ann, gold, kk)
        exact = {case.doc_ids[j] for j in exact_top}
        row[f"ann_recall@{k}"] = round(ann_r, 6)
        row[f"ann_vs_exact@{k}"] = round(len(set(ann[:kk]) & exact) / kk, 6)
    # admitted: a query vector is at hand that serves the query (the probe's, or the user's own)
    admits = pr.certified[i] or probe_r >= 1 or enc_r >= 1
    proof = None if admits else pr.proofs[i]
    row["proof"] = proof
    row["verdict"] = _verdict(admits, proof, unc_admits, enc_r, ann_r)
    return row, (admits, unc_admits)


def _verdict(admits: bool, proof: str | None, unc_admits: bool | None, enc_r: float, ann_r: float | None) -> str:
    """The first part that fails: the geometry (the index's vectors, when ``proof`` says why no
    query vector serves the query; compression when the uncompressed vectors admit it), the
    encoder (exact search), the ANN run; else ok. A query no vector at hand serves and nothing
    proves unservable is ``undetermined``."""
    if not admits:
        if proof is None:
            return "undetermined"
        return "compression-limited" if unc_admits else "index-limited"
    if enc_r < 1:
        return "encoder-limited"
    if ann_r is not None and ann_r < 1:
        return "ann-limited"
    return "ok"
