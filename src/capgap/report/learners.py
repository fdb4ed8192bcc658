"""Where each trained learner stopped, read back from results.csv, and the section "Trained
learners: converged or stopped".

Every trainer (``capgap.training.Convergence``) writes, per dataset x encoder x trained method,
rows of split ``train`` with k empty: ``converged`` (1 / 0), ``steps``, ``max_steps``,
``train_loss`` (the final training objective) and ``loss_improvement`` (the criterion's last
value; absent with too few curve points). A number a learner gives is a measurement of where it
stopped; a *finding* (a gap, a pattern, a verdict) is drawn only from a learner that converged.
Results written before these rows existed read "convergence not recorded", and every section
treats such a learner as not converged for its findings.

The words come from ``capgap.training.describe_state`` ("converged at N steps", "stopped at the
cap N, objective still falling x% per window", "stopped early at N steps, not converged")."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import pandas as pd

from ..training import describe_state  # a function: the report env's import walk stays clear of torch
from .context import ReportContext
from .format import _md_table

# capgap.training.STATE_METRICS, copied: importing a module-level name of capgap.training pulls in
# the whole module's imports (torch, which the report env lacks; tests/workflow/test_envs.py), so the
# report keeps its own copy (tests/report/test_learners.py checks they agree)
STATE_METRICS = ("converged", "early_stopped", "steps", "max_steps", "train_loss", "loss_improvement", "decay_steps")
NOT_RECORDED = "convergence not recorded"
UNTRAINED = "not trained (evaluated as loaded)"
NOT_A_FINDING = "not a finding"  # the mark of a sentence or cell read from a learner that had not converged
# methods trained by gradient under a convergence rule (plus finetuned-<regime>, see is_trained)
TRAINED = (
    "finetuned",
    "finetuned-no-twins",
    "colbert",
    "trained",
    "head-linear-all",
    "head-mlp-all",
    "head-linear",
    "head-mlp",
)
_REGIME = re.compile(r"finetuned-[^@\s]+")  # finetuned@<set>: a transfer row, not a learner of its own


def is_regime(method: str) -> bool:
    """Whether a results.csv method is a fine-tuning regime's (``finetuned-<regime>``, any name
    the config accepts, hyphens included; not ``finetuned-no-twins``, the twin-negatives
    learner, nor a ``finetuned@<set>`` transfer row)."""
    return bool(_REGIME.fullmatch(str(method))) and method != "finetuned-no-twins"


def is_trained(method: str) -> bool:
    """Whether a results.csv method is a trained learner with a convergence state: fine-tuning
    (``finetuned``, ``finetuned-<regime>``, ``finetuned-no-twins``), ColBERT, the ladder's heads
    and the parity task's ``trained`` encoders. Transfer rows (``finetuned@<set>``) are the
    source's adapter applied elsewhere: their state is the source's."""
    return method in TRAINED or bool(_REGIME.fullmatch(str(method)))


@dataclass(frozen=True)
class LearnerState:
    """One learner's state as results.csv records it.

    ``recorded``: a ``converged`` row exists (False: results written before convergence was
    recorded); ``converged``: it converged (False when not recorded); ``steps``, ``max_steps``,
    ``train_loss``: nan when not recorded; ``improvement``: the criterion's last value (None: not
    recorded, or too few curve points)."""

    recorded: bool
    converged: bool
    steps: float = math.nan
    max_steps: float = math.nan
    train_loss: float = math.nan
    improvement: float | None = None
    early_stopped: bool = False
    decay_steps: int = 0

    @property
    def untrained(self) -> bool:
        """Evaluated as loaded: 0 steps under a 0-step cap (e.g. zero-shot ColBERT), no learner."""
        return self.recorded and self.max_steps == 0 and self.steps == 0

    @property
    def finding(self) -> bool:
        """Whether a finding may be drawn from this learner: it converged, early stopping on a
        validation split chose its weights (and that was recorded), or nothing was trained (a
        pre-trained model's numbers are measurements of that model)."""
        return self.recorded and (self.converged or self.early_stopped or self.untrained)

    def describe(self) -> str:
        """``capgap.training.describe_state``'s words, "not trained (evaluated as loaded)", or
        "convergence not recorded"."""
        if not self.recorded:
            return NOT_RECORDED
        if self.untrained:
            return UNTRAINED
        if self.steps != self.steps or self.max_steps != self.max_steps:
            return "converged (steps not recorded)" if self.converged else "not converged (steps not recorded)"
        return describe_state(
            self.converged, int(self.steps), int(self.max_steps), self.improvement, self.early_stopped, self.decay_steps
        )

    def why_not(self, what: str, state: bool = True) -> str:
        """Why no finding is drawn from this learner, ``what`` naming it ("the fine-tuning"):
        "the fine-tuning had not converged (stopped at the cap 100, ...)" (without ``state``: no
        brackets), or "the convergence of the fine-tuning was not recorded"."""
        if not self.recorded:
            return f"the convergence of {what} was not recorded"
        return f"{what} had not converged" + (f" ({self.describe()})" if state else "")


NOT_RECORDED_STATE = LearnerState(recorded=False, converged=False)


def _state_rows(df: pd.DataFrame) -> pd.DataFrame:
    return df[(df["split"] == "train") & df["metric"].isin(STATE_METRICS)] if len(df) else df


def _from_values(v: dict) -> LearnerState:
    if "converged" not in v and v.get("steps") == 0.0 and v.get("max_steps") == 0.0:
        return LearnerState(recorded=True, converged=False, steps=0.0, max_steps=0.0)  # untrained
    if "converged" not in v or v["converged"] != v["converged"]:
        return NOT_RECORDED_STATE
    gain = v.get("loss_improvement", math.nan)
    return LearnerState(
        recorded=True,
        converged=v["converged"] == 1.0,
        steps=v.get("steps", math.nan),
        max_steps=v.get("max_steps", math.nan),
        train_loss=v.get("train_loss", math.nan),
        improvement=gain if gain == gain else None,
        early_stopped=v.get("early_stopped", 0.0) == 1.0,
        decay_steps=int(v.get("decay_steps", 0.0)),
    )


def learner_states(df: pd.DataFrame | None) -> dict[tuple[str, str, str], LearnerState]:
    """Every recorded state of ``df`` (results.csv rows): (dataset, encoder, method) -> state."""
    if df is None or df.empty:
        return {}
    out: dict[tuple[str, str, str], dict] = {}
    for r in _state_rows(df).itertuples(index=False):
        out.setdefault((r.dataset, r.encoder, r.method), {})[r.metric] = float(r.value)
    return {key: _from_values(v) for key, v in out.items()}


def learner_state(df: pd.DataFrame | None, dataset: str, encoder: str, method: str) -> LearnerState:
    """The state of one learner (``NOT_RECORDED_STATE`` when results.csv has no ``converged``
    row for it)."""
    if df is None or df.empty:
        return NOT_RECORDED_STATE
    sel = _state_rows(df)
    sel = sel[(sel["dataset"] == dataset) & (sel["encoder"] == encoder) & (sel["method"] == method)]
    return _from_values({m: float(v) for m, v in zip(sel["metric"], sel["value"])})


LEARNER_COLUMNS = [
    "dataset",
    "encoder",
    "method",
    "recorded",
    "converged",
    "early_stopped",
    "steps",
    "max_steps",
    "train_loss",
    "loss_improvement",
    "state",
]


def _method_rank(method: str) -> tuple[int, str]:
    """Fine-tuning first, then its regimes (by name), twin negatives, ColBERT, the heads, the
    parity task's encoders."""
    fixed = {
        "finetuned": 0,
        "finetuned-no-twins": 2,
        "colbert": 3,
        "head-linear-all": 4,
        "head-mlp-all": 5,
        "head-linear": 6,
        "head-mlp": 7,
        "trained": 8,
    }
    return (fixed.get(method, 1), method)


def learner_table(df: pd.DataFrame | None) -> pd.DataFrame:
    """One row per trained learner of ``df`` (``is_trained``; a model evaluated as loaded, 0
    steps under a 0-step cap, is left out), columns LEARNER_COLUMNS: its recorded state and
    ``state``, the words for it. Datasets and encoders in results.csv order
    (ColBERT's empty encoder after the others), then fine-tuning, its regimes, twin
    negatives, ColBERT, the ladder's heads, the parity task's encoders."""
    rows = []
    if df is not None and not df.empty:
        states = learner_states(df)
        keys = df[["dataset", "encoder", "method"]].drop_duplicates()
        keys = keys[[is_trained(m) for m in keys["method"]]]
        first = {d: i for i, d in enumerate(dict.fromkeys(keys["dataset"]))}
        enc = {e: i for i, e in enumerate(dict.fromkeys(keys["encoder"]))}
        for d, e, m in sorted(
            keys.itertuples(index=False), key=lambda k: (first[k[0]], k[1] == "", enc[k[1]], _method_rank(k[2]))
        ):
            s = states.get((d, e, m), NOT_RECORDED_STATE)
            if s.untrained:  # evaluated as loaded (zero-shot ColBERT): not a learner
                continue
            rows.append(
                {
                    "dataset": d,
                    "encoder": e,
                    "method": m,
                    "recorded": s.recorded,
                    "converged": s.converged,
                    "early_stopped": s.early_stopped,
                    "steps": s.steps,
                    "max_steps": s.max_steps,
                    "train_loss": s.train_loss,
                    "loss_improvement": math.nan if s.improvement is None else s.improvement,
                    "state": s.describe(),
                }
            )
    return pd.DataFrame(rows, columns=LEARNER_COLUMNS)


def _int(v) -> str:
    return "–" if v != v else f"{int(v):,}"


def _pct(v) -> str:
    """A relative improvement in percent: 3.2%; two significant digits below 0.1% (0.05%)."""
    if v != v:
        return "–"
    return f"{100 * v:.1f}%" if abs(100 * v) >= 0.1 or v == 0 else f"{100 * v:.2g}%"


def render_learners(table: pd.DataFrame) -> list[str]:
    """The section's lines (no trained learner: none)."""
    if table.empty:
        return []
    out = [
        "## Trained learners: converged or stopped",
        "",
        "Every trained learner (fine-tuning and its regimes, twin negatives, ColBERT, the ladder's heads) trains "
        "under one convergence rule (`capgap.training.Convergence`): it has converged once its training objective "
        "improves by less than `tol` over its last `n_iter_no_change` curve points (relative to the best objective "
        "before them; an InfoNCE objective below 1 by its absolute change), and stops there or at its step cap "
        "(the ladder's heads then decay their learning rate over `decay_steps` more, up to a fifth of the steps "
        "run by default). A number a learner gives is a measurement of where it stopped; a finding drawn from it "
        "(a gap, the paper's pattern, a verdict) is one only if it converged, and the report marks every sentence "
        "read from a learner that had not converged (or whose convergence was not recorded) as *not a finding*.",
        "",
    ]
    if not table["recorded"].any():
        out += [
            "Convergence was not recorded in these results (they were written before capgap recorded it): every "
            'learner below reads "convergence not recorded" and no finding is drawn from it.',
            "",
        ]
    out.append(
        _md_table(
            [
                "dataset",
                "encoder",
                "learner",
                "state",
                "steps",
                "step cap",
                "final training objective",
                "objective improvement over the last window",
            ],
            [
                [
                    r["dataset"],
                    r["encoder"] or "–",
                    f"`{r['method']}`",
                    r["state"],
                    _int(r["steps"]),
                    _int(r["max_steps"]),
                    "–" if r["train_loss"] != r["train_loss"] else f"{r['train_loss']:.4g}",
                    _pct(r["loss_improvement"]),
                ]
                for r in table.to_dict("records")
            ],
        )
    )
    out.append("")
    n, ok = len(table), int(table["converged"].sum())
    early = int((table["early_stopped"] & ~table["converged"]).sum())
    tail = f"; {early} more stopped by early stopping on a validation split (findings too)" if early else ""
    out += [f"{ok} of {n} trained learners converged{tail}.", ""]
    return out


def render(ctx: ReportContext) -> list[str]:
    """The section (no trained learner on the frozen index's datasets: no lines; the parity
    task's learners are in its own section)."""
    return render_learners(learner_table(ctx.df))
