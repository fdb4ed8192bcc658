"""The report's seaborn figures. Every function writes its PNG atomically, and writes a
placeholder saying why when there is nothing to plot (a stage not run), so the declared
outputs always exist.

Inputs are results.csv rows (tidy: dataset, encoder, method, split, metric, k, value,
compression; see capgap.report.collect) unless stated otherwise.
"""

from .base import HARDNESS_PREFIX, METHOD_NAMES
from .base import _label as _label  # report.outputs labels runs as the figures do
from .results import plot_curves, plot_gap, plot_hardness, plot_recall_curves, plot_slack, plot_train_vs_heldout
from .studies import (
    COMPRESSION_FAMILIES,
    COMPRESSION_MARKERS,
    COMPRESSION_QUANTITIES,
    NEAR_MISS_X,
    NEAR_MISS_Y,
    near_miss_points,
    plot_compression,
    plot_ladder,
    plot_near_miss,
)

__all__ = [
    "HARDNESS_PREFIX",
    "METHOD_NAMES",
    "plot_recall_curves",
    "plot_gap",
    "plot_train_vs_heldout",
    "plot_slack",
    "plot_curves",
    "plot_hardness",
    "COMPRESSION_FAMILIES",
    "COMPRESSION_MARKERS",
    "COMPRESSION_QUANTITIES",
    "plot_compression",
    "NEAR_MISS_X",
    "NEAR_MISS_Y",
    "near_miss_points",
    "plot_near_miss",
    "plot_ladder",
]
