"""The generated report: ``reports/results.csv`` and everything rendered from it.

``results.csv`` (tidy: ``dataset, encoder, method, split, metric, k, value, compression``) is
the single source; ``report.md``, the self-contained ``report.html``, the figures (capgap.figures),
``summary.json`` (every number, nested), ``metrics.json`` (headline numbers for ``dvc
metrics``) and ``plots/recall_at_k.csv`` (``dvc plots``) are all rendered from it, with the
paper's published numbers beside ours (capgap.paper) and a provenance block
(capgap.provenance). The report states the evaluation tie rule once, splits the probe's
uncertified queries by cause (duplicate documents, tied queries, geometry), marks capacities
certified by construction, lists duplicate documents / queries per dataset (``status.json``)
and names the BM25 variant that ran (``capgap.bm25.variant_name`` of the run config); older
results without these rows or keys render with "not recorded".

Every trained learner's convergence state (``capgap.training``: rows ``converged``, ``steps``,
``max_steps``, ``train_loss``, ``loss_improvement`` of split ``train``) is shown wherever the
report shows its numbers, in ``capgap.training.describe_state``'s words; a finding (the
At-a-glance gap, the paper's pattern, a near-miss verdict on fine-tuning, the ladder's gap split)
is drawn only from converged learners: otherwise its number stays and it is marked *not a
finding*, or the ladder's part reads "not determined". Results without these rows read
"convergence not recorded" and count as not converged.

Rows of rule ``compress`` (``compression`` names the index variant) feed only the section
"Capacity under index compression" and ``figures/compression.png`` (``compression_table``,
``compression_sentence``, ``render_compression``); every other output is computed from the
rows with ``compression`` empty, so it reads the same with or without them.

Rows of twin metrics (``twin_win:<type>`` etc., ``capgap.nearmiss``) and of the near-miss
adapters on transfer targets (methods ``finetuned@<source>``, ``finetuned-no-twins@<source>``)
feed the section "Near-miss twins: geometry or learning?" and ``figures/near_miss.png``
(``near_miss_table``, ``twin_verdict``, ``transfer_table``, ``transfer_sentence``,
``render_near_miss``); without them the section is absent and the figure a placeholder.

One module per section, assembled in order by ``build.SECTIONS`` (a section is a module with
``render(ctx) -> list[str]`` and, where it shows figures, ``draw(ctx, outputs)``; a new section
is one new module and one line there):

- ``intro`` (title, tie rule), ``glance`` (at a glance, summary table, gap figure),
  ``paper_comparison``, ``mteb_comparison`` (MTEB's published numbers beside the pre-trained
  rows, differences above 0.001 flagged: ``capgap.mteb``), ``datasets``, ``capacity`` (the
  probe vs the encoders, slack figure), ``learners`` (where every trained learner stopped:
  converged or at its step cap; the helpers every section uses to mark a finding read from a
  learner that had not converged),
  ``late_interaction`` (the paper's LIMIT comparison), ``near_miss`` (``twins``: tables and
  verdicts; ``transfer``), ``per_dataset``, ``plots`` (recall@k, fine-tuning curves),
  ``missed`` (geometrically easy but missed), ``compression``, ``ladder`` (the learnability
  ladder: rungs, gap split, figure), ``hardness``, ``provenance``;
- ``certification`` (certificates by cause, used by ``capacity``), ``table`` (the summary
  table and its cut-offs), ``results`` (collecting results.csv), ``context`` (the rule's inputs
  and outputs, dataset infos, ``ReportContext``), ``gather`` (inputs -> context), ``format``
  (shared cell and table helpers), ``html``, ``outputs`` (summary.json, metrics.json,
  plots/recall_at_k.csv), ``build`` (``render_markdown``, ``build_report``).

Every public name is re-exported here (``from capgap.report import build_report``).
"""

from .build import MARKDOWN_SECTIONS, SECTIONS, build_report, render_markdown
from .capacity import SLACK_TEXT
from .certification import CONSTRUCTION_RULES, OUTCOMES, construction_reasons, render_certification
from .compression import (
    COMPRESSION_COLUMNS,
    COMPRESSION_TOL,
    compression_family,
    compression_onset,
    compression_sentence,
    compression_table,
    render_compression,
)
from .context import FIGURES, ReportContext, ReportInputs, ReportOutputs, bm25_variant, dataset_infos, gold_sizes
from .datasets import render_datasets
from .gather import gather
from .glance import MARK, NOT_RUN_HINT, render_summary
from .hardness import render_hardness
from .html import HTML_STYLE, render_html
from .intro import TIE_RULE
from .ladder import (
    LADDER_COLUMNS,
    LADDER_FIGURE_COLUMNS,
    gap_sentence,
    gap_split,
    ladder_figure_data,
    ladder_rungs,
    ladder_table,
    render_ladder,
)
from .learners import (
    LEARNER_COLUMNS,
    NOT_A_FINDING,
    NOT_RECORDED,
    LearnerState,
    is_trained,
    learner_state,
    learner_states,
    learner_table,
    render_learners,
)
from .missed import render_missed
from .mteb_comparison import render_mteb
from .near_miss import render_near_miss
from .outputs import headline_metrics, recall_plot_rows, summary
from .paper_comparison import mark_learners, paper_points, render_paper
from .provenance import render_provenance
from .results import METHOD_ORDER, SPLIT_ORDER, collect, compressed, uncompressed
from .table import CAUSES, RPREC, SUMMARY_COLUMNS, report_ks, summary_table
from .transfer import TRANSFER_COLUMNS, transfer_reference, transfer_sentence, transfer_table
from .twins import (
    NEAR_MISS_COLUMNS,
    NO_TWINS,
    TRANSFER_METHOD,
    TWIN_METHODS,
    TWIN_SOLVED,
    near_miss_table,
    twin_metric_rows,
    twin_types,
    twin_verdict,
    twin_verdict_kind,
)

__all__ = [
    "CAUSES",
    "COMPRESSION_COLUMNS",
    "COMPRESSION_TOL",
    "CONSTRUCTION_RULES",
    "FIGURES",
    "HTML_STYLE",
    "LADDER_COLUMNS",
    "LADDER_FIGURE_COLUMNS",
    "LEARNER_COLUMNS",
    "MARK",
    "MARKDOWN_SECTIONS",
    "METHOD_ORDER",
    "NEAR_MISS_COLUMNS",
    "NOT_A_FINDING",
    "NOT_RECORDED",
    "NOT_RUN_HINT",
    "NO_TWINS",
    "OUTCOMES",
    "RPREC",
    "SECTIONS",
    "SLACK_TEXT",
    "SPLIT_ORDER",
    "SUMMARY_COLUMNS",
    "TIE_RULE",
    "TRANSFER_COLUMNS",
    "TRANSFER_METHOD",
    "TWIN_METHODS",
    "TWIN_SOLVED",
    "LearnerState",
    "ReportContext",
    "ReportInputs",
    "ReportOutputs",
    "bm25_variant",
    "build_report",
    "collect",
    "compressed",
    "compression_family",
    "compression_onset",
    "compression_sentence",
    "compression_table",
    "construction_reasons",
    "dataset_infos",
    "gap_sentence",
    "gap_split",
    "gather",
    "gold_sizes",
    "headline_metrics",
    "is_trained",
    "ladder_figure_data",
    "ladder_rungs",
    "ladder_table",
    "learner_state",
    "learner_states",
    "learner_table",
    "mark_learners",
    "near_miss_table",
    "paper_points",
    "recall_plot_rows",
    "render_certification",
    "render_compression",
    "render_datasets",
    "render_hardness",
    "render_html",
    "render_ladder",
    "render_learners",
    "render_markdown",
    "render_missed",
    "render_mteb",
    "render_near_miss",
    "render_paper",
    "render_provenance",
    "render_summary",
    "report_ks",
    "summary",
    "summary_table",
    "transfer_reference",
    "transfer_sentence",
    "transfer_table",
    "twin_metric_rows",
    "twin_types",
    "twin_verdict",
    "twin_verdict_kind",
    "uncompressed",
]
