"""What every figure shares: the method names, the lazy matplotlib/seaborn import, the atomic
PNG write and the placeholder for a figure with nothing to plot."""

from __future__ import annotations

from ..io import atomic_open

HARDNESS_PREFIX = "parity-P"
METHOD_NAMES = {
    "probe": "capacity (probe)",
    "pretrained": "pre-trained",
    "finetuned": "fine-tuned",
    "bm25": "BM25",
    "colbert": "ColBERT",
    "finetuned-no-twins": "fine-tuned without twins",
}


def _mpl():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    return plt, sns


def _save(fig, path) -> None:
    plt, _ = _mpl()
    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)


def _label(method: str, encoder: str) -> str:
    name = METHOD_NAMES.get(method, method)
    return f"{name} ({encoder})" if encoder else name


def _placeholder(path, text):
    plt, _ = _mpl()
    fig = plt.figure(figsize=(4, 1.5))
    fig.text(0.5, 0.5, text, ha="center", va="center")
    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=110)
    plt.close(fig)
