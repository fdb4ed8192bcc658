"""The capacity probe: per query, a ranking SVM over the frozen index, solved by Joachims'
1-slack cutting-plane method with OCAS's line search, whose witness w either ranks every gold
document above every other one (a certificate) or is proven unable to (an inseparability
proof or an exact LP). The method, its settings and outcomes: docs/probe.md.

Modules:

- ``solver``: ``probe()`` (checks, batches, screening or the whole index); ``config``:
  ``ProbeConfig``, ``SolveSettings``, ``SOLVES``, ``PAIRS``; ``constants``: internal constants,
  read at call time (patch ``capgap.probe.constants``); ``result``: ``ProbeResult``, ``OUTCOMES``;
- ``setup`` / ``state``: what every batch shares (``SolveContext``) and one problem's state;
  ``batch``: the cutting-plane loop; ``workers``: batches in worker processes; ``planes``:
  most violated constraint, dual QP, products;
- ``proofs``: ``lp_feasible``, ``hull_distance_bound``, column and constraint generation;
  ``ties``: the text-tie rule; ``finish``: a problem's verdict; ``refine``: the duplicates'
  second solve;
- ``records``: per-query records and result rows; ``shards``: the probe over shards of whole
  batches (``probe.shards``); ``screen``: an index of more than ``SCREEN_MIN_DOCS`` documents,
  each query on its candidate documents, checked against the whole index;
- ``stage``: the DAG's rules ``probe`` and ``probe_shard``.

Every public name is re-exported here (``from capgap.probe import probe, ProbeConfig``).
"""

from .config import PAIRS, SOLVES, ProbeConfig
from .proofs import hull_distance_bound, lp_feasible
from .records import evaluate, evaluate_results, per_query_records, probe_arguments, summary_rows, twin_margins
from .result import OUTCOMES, ProbeResult
from .solver import probe

__all__ = [
    "OUTCOMES",
    "PAIRS",
    "SOLVES",
    "ProbeConfig",
    "ProbeResult",
    "evaluate",
    "hull_distance_bound",
    "lp_feasible",
    "evaluate_results",
    "per_query_records",
    "probe",
    "probe_arguments",
    "summary_rows",
    "twin_margins",
]
