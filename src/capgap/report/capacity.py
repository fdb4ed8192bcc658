"""Section "Capacity probe vs the query encoders": the probe's recall beside the pre-trained and
fine-tuned encoders' (held-out), its certified fraction, slack and iterations, the certificates
by cause (``capgap.report.certification``), and the slack figure."""

from __future__ import annotations

from .. import figures
from .certification import render_certification
from .context import ReportContext, ReportOutputs
from .format import _count, _figure, _md_table, _sci, _value

SLACK_TEXT = (
    "Per-query slack (pair-averaged hinge loss) of the probe's cutting-plane solution at the final C. The "
    "cutting plane stops once the most violated constraint exceeds the working set's slack by at most eps "
    "(dotted line), so slack at or below eps is solver tolerance; certified queries separate every gold "
    "document strictly, whatever their slack."
)


def draw(ctx: ReportContext, outputs: ReportOutputs) -> dict[str, bool]:
    """The distribution of the probe's per-query slack, with the config's ``probe.eps``."""
    eps = ((ctx.config or {}).get("probe") or {}).get("eps")
    return {"slack_png": figures.plot_slack(ctx.inputs.per_query, outputs.slack_png, eps=eps)}


def render(ctx: ReportContext) -> list[str]:
    """The probe table per dataset x encoder ("Not run" without probe rows), the certificates by
    cause, then the slack figure."""
    df = ctx.df
    probe = df[df["method"] == "probe"]
    out = ["## Capacity probe vs the query encoders (held-out queries)", ""]
    if probe.empty:
        out += ["Not run (probe.enabled is false, or no dataset was available).", ""]
    else:
        out.append(
            "Probe = a per-query ranking SVM on the frozen index (Joachims' 1-slack cutting plane): "
            "its recall is a lower bound on the best recall any query vector can reach on that index; "
            "certified = every gold document ranked above every non-gold one; not converged = fraction of "
            "queries that hit the iteration cap."
        )
        out.append("")

        def one(d, e, m, split, metric, k=None):
            return _value(df, d, e, m, split, metric, k)

        rows = []
        for (d, e), _ in probe.groupby(["dataset", "encoder"], sort=False):
            rows.append(
                [d, e]
                + [one(d, e, m, "heldout", "recall", k) for k in (2, 10) for m in ("probe", "pretrained", "finetuned")]
                + [
                    one(d, e, "finetuned", "train", "recall", 2),
                    one(d, e, "probe", "heldout", "certified"),
                    _sci(one(d, e, "probe", "heldout", "slack_median")),
                    _count(one(d, e, "probe", "heldout", "iterations_median")),
                    one(d, e, "probe", "heldout", "not_converged"),
                ]
            )
        out.append(
            _md_table(
                [
                    "dataset",
                    "encoder",
                    "probe R@2",
                    "pre-trained R@2",
                    "fine-tuned R@2",
                    "probe R@10",
                    "pre-trained R@10",
                    "fine-tuned R@10",
                    "fine-tuned train R@2",
                    "certified",
                    "median slack",
                    "median iterations",
                    "not converged (fraction)",
                ],
                rows,
            )
        )
        out.append("")
        out.append(
            "Fine-tuned = LoRA on the query side, InfoNCE against the frozen index, trained on train queries "
            "only; the columns are held-out recall unless marked train."
        )
        out.append("")
        out += render_certification(probe, ctx.construction)
    return out + _figure(
        ctx.figs, "slack_png", "Probe slack distribution", "the probe's per-query slack", "the probe", SLACK_TEXT
    )
