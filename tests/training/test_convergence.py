"""The convergence rule every trainer stops on (capgap.training.Convergence), with values worked
out by hand."""

import math

import numpy as np
import pytest
import torch

from capgap.training import (
    STATE_METRICS,
    Convergence,
    describe_state,
    relative_improvement,
    run_loop,
    seed_everything,
    state_from_curve,
)


def test_relative_improvement_by_hand():
    # window 2: the best before the window is min(10, 9) = 9, the window's best 8.89: (9 - 8.89) / 9
    assert relative_improvement([10, 9, 8.9, 8.89], 2) == pytest.approx(0.11 / 9)
    # window 1: the last point against the best of every point before it (a rise counts as none)
    assert relative_improvement([4.0, 2.0, 3.0], 1) == pytest.approx(-0.5)
    assert math.isnan(relative_improvement([1.0, 0.5], 2))  # too few points
    # a non-finite point (a diverged step) is left out of the minima; a run that ends on one is not judged
    assert relative_improvement([1.0, float("nan"), 0.5], 1) == pytest.approx(0.5)
    assert math.isnan(relative_improvement([1.0, 0.5, float("inf")], 1))
    assert math.isnan(relative_improvement([float("nan"), float("nan"), 0.5], 2))
    assert relative_improvement([0.0, 0.0], 1) == 0.0
    # below 1 the change is absolute (SciPy's ftol scaling): 0.02 -> 0.01 is 0.01, not 50%
    assert relative_improvement([0.02, 0.01], 1) == pytest.approx(0.01)
    # floor 0 (a squared error): relative all the way down: 50%; nothing to improve on 0: 0
    assert relative_improvement([0.02, 0.01], 1, floor=0.0) == pytest.approx(0.5)
    assert relative_improvement([0.0, 0.0], 1, floor=0.0) == 0.0
    rule = Convergence(0.01, 1, 100, floor=0.0)
    assert not any(rule.converged([0.5 * 0.9**i for i in range(j + 1)]) for j in range(60))  # 10% per point, forever
    # a window that rose by tol or more is diverging, not converged; a flat one is converged
    assert not Convergence(0.01, 1, 100).converged([1.0, 10.0, 100.0])
    assert Convergence(0.01, 1, 100).converged([3.0, 2.0, 2.005])  # rose 0.25%: within tol


def test_a_plateau_is_found_at_the_point_worked_out_by_hand():
    """tol 0.01, window 2 on 10, 8, 7, 6.9, 6.85, 6.84: the criterion after each point is
    nan, nan, (10 - 7) / 10 = 0.3, (8 - 6.9) / 8 = 0.1375, (7 - 6.85) / 7 = 0.0214 and
    (6.9 - 6.84) / 6.9 = 0.0087: the first below 0.01 is the sixth point."""
    rule = Convergence(tol=0.01, n_iter_no_change=2, max_iter=100)
    seq = [10, 8, 7, 6.9, 6.85, 6.84]
    assert [rule.converged(seq[: i + 1]) for i in range(len(seq))] == [False] * 5 + [True]


def test_a_slowly_falling_objective_is_not_called_converged():
    """2% lower at every point, from 100 to 1.8 (above 1: relative): over a window of 2 points
    1 - 0.98^2 = 3.96% > 1%, at any length."""
    rule = Convergence(tol=0.01, n_iter_no_change=2, max_iter=10**6)
    seq = [100 * 0.98**i for i in range(200)]
    assert not any(rule.converged(seq[: i + 1]) for i in range(len(seq)))
    assert relative_improvement(seq, 2) == pytest.approx(1 - 0.98**2)


def test_the_rule_refuses_settings_that_cannot_work():
    for bad in ((-0.1, 2, 10), (0.01, 0, 10), (0.01, 2, 0)):
        with pytest.raises(ValueError, match="convergence"):
            Convergence(*bad)


def test_describe_state_words():
    assert describe_state(True, 1200, 3000, 0.004) == "converged at 1,200 steps"
    assert describe_state(False, 200, 200, 0.0362) == "stopped at the cap 200, objective still falling 3.6% per window"
    assert describe_state(False, 200, 200, None) == "stopped at the cap 200, too few curve points to judge"
    assert describe_state(False, 60, 200, 0.2) == "stopped early at 60 steps, not converged"
    assert (
        describe_state(False, 60, 200, 0.2, early_stopped=True) == "stopped early by its validation split at 60 steps"
    )


def _quadratic(ckpt=None, stop_after=None, rule=Convergence(0.05, 2, 200)):
    """A least-squares fit y = X a trained by run_loop (SGD, batches of 4 of 12 items; noise-free,
    so the objective falls geometrically toward 0 and then levels off at the floor the batches'
    rounding leaves); the objective at a curve point: the full-set mean squared error."""
    sampler = seed_everything(0)
    model = torch.nn.Linear(3, 1, bias=False)
    X = torch.linspace(-1, 1, 36).reshape(12, 3)
    y = X @ torch.tensor([[1.0], [-2.0], [0.5]]) + 0.3 * torch.sin(7 * X[:, :1])  # a residual: the optimum is not 0
    opt = torch.optim.SGD(model.parameters(), lr=0.2)
    res = run_loop(
        lambda b: ((model(X[b]) - y[b]) ** 2).mean(),
        model,
        opt,
        rule.max_iter,
        12,
        4,
        sampler,
        ckpt_path=ckpt,
        digest={"s": "x"},
        checkpoint_every=3,
        eval_every=2,
        stop_after=stop_after,
        convergence=rule,
        objective=lambda: float(((model(X) - y) ** 2).mean()),
    )
    return model, res


def test_run_loop_stops_at_convergence_and_a_resumed_run_stops_at_the_same_step(tmp_path):
    model, res = _quadratic()
    objectives = [p["objective"] for p in res.curve]
    # the step the rule stops at, recomputed from the curve's own objectives
    first = next(i for i in range(len(objectives)) if Convergence(0.05, 2, 200).converged(objectives[: i + 1]))
    assert first == len(objectives) - 1 and res.converged_at == res.curve[-1]["step"] == 2 * (first + 1) < 200
    assert res.convergence.converged and res.convergence.steps == res.converged_at
    assert res.convergence.objective == objectives[-1]
    assert (
        res.curve[-1]["improvement"] == pytest.approx(relative_improvement(objectives, 2))
        and res.curve[-1]["improvement"] < 0.05
    )
    # the results.csv rows say what the curve says
    rows = {r["metric"]: r["value"] for r in res.convergence.rows("d", "e", "m")}
    assert set(rows) == set(STATE_METRICS) - {"decay_steps"} and all(
        r["split"] == "train" for r in res.convergence.rows("d", "e", "m")
    )
    assert rows == {
        "converged": 1.0,
        "early_stopped": 0.0,
        "steps": float(res.converged_at),
        "max_steps": 200.0,
        "train_loss": objectives[-1],
        "loss_improvement": res.curve[-1]["improvement"],
    }
    assert state_from_curve(res.curve, Convergence(0.05, 2, 200)) == res.convergence
    # killed after 5 steps, resumed: the same stop, curve and weights
    ckpt = tmp_path / "q.pt"
    with pytest.raises(KeyboardInterrupt):
        _quadratic(ckpt, stop_after=5)
    back, res_back = _quadratic(ckpt)
    assert res_back.resumed_from == 3 and res_back.converged_at == res.converged_at and res_back.curve == res.curve
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), back.state_dict().values()))
    # a finished run's checkpoint: nothing trains, the same state
    again, res_again = _quadratic(ckpt)
    assert res_again.steps_run == 0 and res_again.convergence == res.convergence


def test_run_loop_at_the_cap_is_not_converged(caplog):
    """tol 0: no run converges; it stops at the cap, says so in a warning, and its state holds
    the criterion's last value."""
    import logging

    with caplog.at_level(logging.WARNING, logger="capgap.training"):
        _, res = _quadratic(rule=Convergence(0.0, 2, 10))
    assert res.converged_at is None and not res.convergence.converged and res.convergence.steps == 10
    assert [p["step"] for p in res.curve] == [2, 4, 6, 8, 10]
    assert "not converged: stopped at the cap 10" in caplog.text
    objectives = [p["objective"] for p in res.curve]
    assert res.convergence.improvement == pytest.approx(relative_improvement(objectives, 2))


def test_run_loop_needs_the_rules_cap_and_curve_points():
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="cap"):
        run_loop(
            lambda b: model(torch.ones(len(b), 2)).sum(),
            model,
            opt,
            5,
            4,
            2,
            seed_everything(0),
            eval_every=1,
            convergence=Convergence(0.01, 2, 6),
        )
    with pytest.raises(ValueError, match="eval_every"):
        run_loop(
            lambda b: model(torch.ones(len(b), 2)).sum(),
            model,
            opt,
            5,
            4,
            2,
            seed_everything(0),
            convergence=Convergence(0.01, 2, 5),
        )


def test_state_rows_leave_out_a_criterion_too_few_points_had():
    rule = Convergence(0.01, 3, 4)
    state = rule.state([2.0, 1.0], 4, False)
    assert state.improvement is None
    assert {r["metric"] for r in state.rows("d", "e", "m")} == {
        "converged",
        "early_stopped",
        "steps",
        "max_steps",
        "train_loss",
    }
    assert state.to_dict()["improvement"] is None and np.isfinite(state.to_dict()["objective"])


def test_early_stopping_is_recorded_as_such():
    """patience on a validation split ends a run before the rule or the cap: the state says a
    validation split chose the weights (a finding, not 'not converged'), and the curve with the
    same flag says the same (state_from_curve). The same stop on a monitor that is not a
    validation split (e.g. held-out recall) is not converged."""

    def run(validation):
        sampler = seed_everything(0)
        model = torch.nn.Linear(4, 1)
        X = torch.linspace(-1, 1, 40).reshape(10, 4)
        values = iter([0.1, 0.5, 0.4, 0.3, 0.2])
        return run_loop(
            lambda b: (model(X[b]) ** 2).mean() + 1.0,
            model,
            torch.optim.SGD(model.parameters(), lr=1e-3),
            30,
            10,
            4,
            sampler,
            evaluate=lambda step: {"v": next(values)},
            eval_every=3,
            patience=2,
            monitor=lambda p: p["v"],
            convergence=rule,
            validation=validation,
        )

    rule = Convergence(1e-9, 3, 30)
    res = run(True)
    assert res.stopped_at == 12 and res.converged_at is None
    assert res.convergence.early_stopped and not res.convergence.converged
    assert res.convergence.describe() == "stopped early by its validation split at 12 steps"
    assert {r["metric"]: r["value"] for r in res.convergence.rows("d", "e", "m")}["early_stopped"] == 1.0
    assert state_from_curve(res.curve, rule, validation=True) == res.convergence
    held_out = run(False)
    assert held_out.stopped_at == 12 and not held_out.convergence.early_stopped and not held_out.convergence.converged
    assert held_out.convergence.describe() == "stopped early at 12 steps, not converged"
    assert state_from_curve(held_out.curve, rule) == held_out.convergence


def test_curves_without_objectives_and_tiny_improvements():
    """A null objective (a non-finite value in strict JSON) reads as NaN: no verdict, no crash; a
    curve without objectives is refused by name; an improvement under 0.1% still shows."""
    rule = Convergence(0.01, 1, 10)
    state = state_from_curve(
        [{"step": 5, "loss": 1.0, "objective": 1.0}, {"step": 10, "loss": 0.9, "objective": None}], rule
    )
    assert not state.converged and state.improvement is None and math.isnan(state.objective)
    with pytest.raises(ValueError, match="no objective"):
        state_from_curve([{"step": 5, "loss": 1.0}], rule)
    assert describe_state(False, 10, 10, 0.00004) == "stopped at the cap 10, objective still falling 0.004% per window"


def test_a_fixed_length_protocol_trains_to_the_cap_and_is_judged_at_its_last_point():
    """stop False (the paper's 3,000-step protocol): the run the rule would stop at convergence
    trains every step to the cap, and its state is the rule applied to its last point: converged
    when the objective's last window improved by less than tol, computed here from the curve."""
    _, stopping = _quadratic()
    assert stopping.converged_at is not None and stopping.converged_at < 200
    _, fixed = _quadratic(rule=Convergence(0.05, 2, 200, stop=False))
    assert fixed.converged_at == 200 and fixed.curve[-1]["step"] == 200 and len(fixed.curve) == 100
    objectives = [p["objective"] for p in fixed.curve]
    assert fixed.curve[: len(stopping.curve)] == stopping.curve  # the same run, continued past the rule's point
    assert relative_improvement(objectives, 2) < 0.05 and fixed.convergence.converged and fixed.convergence.steps == 200
    # a fixed-length run whose last window still falls by more than tol is not converged
    _, short = _quadratic(rule=Convergence(0.001, 2, 6, stop=False))
    gain = relative_improvement([p["objective"] for p in short.curve], 2)
    assert gain > 0.001 and not short.convergence.converged and short.convergence.steps == 6


def test_patience_counts_from_the_start_when_the_start_is_a_candidate():
    """monitor_start: the initial model's validation value. When it stays the best, training
    stops patience points after the start (not after the first curve point); without it the
    count starts at the first point."""

    def run(start):
        sampler = seed_everything(0)
        model = torch.nn.Linear(4, 1)
        X = torch.linspace(-1, 1, 40).reshape(10, 4)
        values = iter([0.3, 0.2, 0.1, 0.05, 0.01, 0.0, 0.0, 0.0, 0.0, 0.0])
        return run_loop(
            lambda b: (model(X[b]) ** 2).mean() + 1.0,
            model,
            torch.optim.SGD(model.parameters(), lr=1e-3),
            30,
            10,
            4,
            sampler,
            evaluate=lambda step: {"v": next(values)},
            eval_every=3,
            patience=2,
            monitor=lambda p: p["v"],
            validation=True,
            monitor_start=start,
        )

    assert run(0.9).stopped_at == 6  # the start (0.9) best: points at 3 and 6 bring none better
    assert run(None).stopped_at == 9  # the first point (0.3) best: points at 6 and 9 bring none better
    assert run(0.1).stopped_at == 9  # the first point (0.3) beats the start: counted from it


def test_a_validation_value_still_rising_at_the_cap_is_not_early_stopping():
    """Early stopping is when patience ended the run: validation 0.1, 0.2, ... rising to the cap
    (the kept point the last), or one dip at the cap (0.1, 0.5, 0.3, 0.4: two points after the
    best, patience 3 unspent) leave the cap as what ended it: neither converged nor early-stopped
    (not a finding). Patience 2 on the same values ends the run at the fourth point (step 12 of
    15): early-stopped. A NaN validation value is never the best."""

    def run(values, patience=3, cap=12):
        sampler = seed_everything(0)
        model = torch.nn.Linear(4, 1)
        X = torch.linspace(-1, 1, 40).reshape(10, 4)
        it = iter(values)
        return run_loop(
            lambda b: (model(X[b]) ** 2).mean() + 1.0,
            model,
            torch.optim.SGD(model.parameters(), lr=1e-3),
            cap,
            10,
            4,
            sampler,
            evaluate=lambda step: {"v": next(it)},
            eval_every=3,
            patience=patience,
            monitor=lambda p: p["v"],
            convergence=Convergence(1e-9, 3, cap),
            validation=True,
            monitor_start=0.0,
        )

    rising = run([0.1, 0.2, 0.3, 0.4])
    assert rising.stopped_at is None and not rising.convergence.early_stopped and not rising.convergence.converged
    assert rising.convergence.describe().startswith("stopped at the cap 12")
    dip = run([0.1, 0.5, 0.3, 0.4])
    assert (
        dip.stopped_at is None
        and not dip.convergence.early_stopped
        and dip.convergence.describe().startswith("stopped at the cap 12")
    )
    peaked = run([0.1, 0.5, 0.3, 0.4, 0.2], patience=2, cap=15)
    assert peaked.stopped_at == 12 and peaked.convergence.early_stopped
    assert peaked.convergence.describe() == "stopped early by its validation split at 12 steps"
    nan = run([0.1, float("nan"), 0.3, 0.2, 0.25, 0.1], patience=2, cap=18)
    assert nan.stopped_at == 15  # best 0.3 at step 9 (not the NaN at 6): two points after it


def test_a_fixed_length_run_that_patience_ended_is_judged_as_its_curve_is():
    """stop False with patience: run_loop's own state and state_from_curve (what ColBERT writes)
    agree: both apply the rule at the last point."""
    sampler = seed_everything(0)
    model = torch.nn.Linear(3, 1, bias=False)
    X = torch.linspace(-1, 1, 36).reshape(12, 3)
    y = X @ torch.tensor([[1.0], [-2.0], [0.5]])
    values = iter([0.9, 0.5, 0.4, 0.3] + [0.1] * 100)
    rule = Convergence(0.05, 2, 200, stop=False)
    res = run_loop(
        lambda b: ((model(X[b]) - y[b]) ** 2).mean(),
        model,
        torch.optim.SGD(model.parameters(), lr=0.2),
        200,
        12,
        4,
        sampler,
        evaluate=lambda step: {"v": next(values)},
        eval_every=2,
        patience=3,
        monitor=lambda p: p["v"],
        convergence=rule,
        objective=lambda: float(((model(X) - y) ** 2).mean()),
    )
    assert res.stopped_at == 8
    assert res.convergence == state_from_curve(res.curve, rule)
    assert res.convergence.converged == rule.converged([p["objective"] for p in res.curve])
