"""`evaluate(..., check_convergence=True)` (`gradkit.evaluation._convergence`): the reruns with twice the
budget, the flag `not_converged`, the ascents' loss tails and the flag `still_improving`."""

import numpy as np
import pytest

import gradkit
from gradkit import backend
from gradkit.attacks import tracing_losses
from gradkit.attacks._engine import LossTrace
from gradkit.evaluation import _convergence, _plan, _state

EPS, N = 0.14, 64  # on the digits CNN: 2 steps leave points that twice the budget breaks, 100 do not
ATTACKS = ["apgd-ce", "apgd-t"]


def _config(attacks, version="custom", steps=7, n_queries=30):
    entries = (
        _plan.plan(attacks, False)
        if version == "custom"
        else _plan.plan_version(version, np.inf, False, 10, 1)[0]
    )
    return _plan.Config(
        eps=0.1, norm=np.inf, clip_values=None, batch_size=None, seed=0, n_queries=n_queries, steps=steps,
        verbose=0, entries=entries, version=version, check_convergence=True,
    )  # fmt: skip


def test_reruns_double_steps_queries_and_restarts_where_an_attack_has_them():
    config = _config(["apgd-ce", "pgd", "fgsm", "square", "fab", (lambda m, x, y, eps: x)])
    reruns = {e.name: dict(e.settings) for e in _convergence.entries(config)[len(config.entries) :]}
    assert reruns == {
        "apgd-ce (x2)": {"steps": 14, "n_restarts": 2},  # apgd's default restart
        "pgd (x2)": {"steps": 14},  # no restarts
        "square (x2)": {"n_queries": 60},
        "fab (x2)": {"steps": 14, "n_restarts": 2},  # the name's own restart
    }  # fgsm (one step) and the callable are not rerun
    standard = _convergence.entries(_config(None, version="standard"))
    assert [e.name for e in standard][4:] == ["apgd-ce (x2)", "apgd-t (x2)", "fab-t (x2)", "square (x2)"]
    assert dict(standard[5].settings) == {"n_restarts": 2, "n_target_classes": 9, "steps": 14}
    off = _plan.Config(**{**vars(config), "check_convergence": False})
    assert _convergence.entries(off) == config.entries


def _tensor(values, dtype="float32"):
    return backend.to_tensor(np.asarray(values, dtype))


def test_loss_trace_pools_the_rows_no_run_fooled_over_the_last_tenth_of_steps():
    trace = LossTrace()
    fixed = {"weights": {"rows": _tensor([1, 1, 1, 0])}}  # row 3 pads the batch
    best = np.array([[0.1, 0.2, 0.3, 9.0]] * 20) + np.arange(20)[:, None] * [[0.01, 0.0, 0.02, 1.0]]
    for k in range(20):  # row 1 is fooled from step 5 on
        trace.note(
            {"best_values": _tensor(best[k]), "success": _tensor([False, k >= 5, False, False], bool)}, fixed
        )
    other = {"weights": {"rows": _tensor([1])}}  # a second run (another batch, restart or target)
    for k in range(10):
        trace.note({"value": _tensor([1.0 + k]), "success": _tensor([False], bool)}, other)  # PGD's name
    trace.note({"x": _tensor([0.0])}, other)  # no best loss in the state (FAB, Square): nothing
    assert [len(run) for run in trace.runs] == [20, 10]
    start, end, count = trace.tails(0.1)  # run 1: steps 17 -> 19 (the last 2 of 20); run 2: 8 -> 9
    assert count == 3
    assert start == pytest.approx(0.27 + 0.64 + 9.0, abs=1e-5)
    assert end == pytest.approx(0.29 + 0.68 + 10.0, abs=1e-5)


def test_rise_is_relative_and_still_improving_fires_above_one_in_a_thousand():
    assert _convergence.rise([2.0, 2.003, 2]) == pytest.approx(1.5e-3)
    assert _convergence.rise([-0.5, -0.4, 1]) == pytest.approx(0.2)  # DLR losses are negative
    assert _convergence.rise([0.0, 0.0, 0]) is None  # no row left
    per_attack = {
        "apgd-ce": {"loss_tail": [2.0, 2.003, 2]},
        "apgd-t": {"loss_tail": [2.0, 2.0019, 2]},  # +0.095%: not flagged
        "square": {"n_points": 3},
    }
    flag = _convergence.still_improving(per_attack)
    assert flag["name"] == "still_improving" and "apgd-ce (+0.15%)" in flag["message"]
    assert "apgd-t" not in flag["message"]
    assert _convergence.still_improving({"apgd-t": per_attack["apgd-t"]}) is None


def test_the_trace_of_apgd_ends_at_the_loss_of_its_returned_examples(digits_cnn):
    model, x, y = digits_cnn
    x, y = x[:16], y[:16]
    with gradkit.attacks.recording() as record, tracing_losses() as trace:
        x_adv = gradkit.apgd(model, x, y, eps=0.1, steps=20, clip_values=(0, 1), seed=0)
    losses = np.stack([backend.to_numpy(t) for t in trace.runs[0]])[:, :16].astype(np.float64)
    left = ~record.success
    assert left.any() and np.isnan(losses[-1, ~left]).all()
    assert (np.diff(losses[:, left], axis=0) >= 0).all()  # APGD's best loss never falls
    logits = np.asarray(model.predict(x_adv, verbose=0), np.float64)
    z = logits - logits.max(axis=1, keepdims=True)
    ce = np.log(np.exp(z).sum(axis=1)) - z[np.arange(16), y]  # the returned example: the best point
    start, end, count = trace.tails(0.1)
    assert count == left.sum() and end == pytest.approx(ce[left].sum(), rel=1e-4)
    assert start == pytest.approx(losses[-3, left].sum(), rel=1e-6)  # 21 steps recorded: 18 -> 20
    with tracing_losses() as trace:  # PGD as evaluate runs it keeps its best loss too (not FAB, Square)
        gradkit.attacks.run_attack("pgd", model, x, y, eps=0.1, steps=5, clip_values=(0, 1), seed=0)
        gradkit.attacks.run_attack("fab", model, x, y, eps=0.1, steps=5, clip_values=(0, 1))
    assert [len(run) for run in trace.runs] == [6]  # 5 steps and the evaluation of the last iterate


def test_two_steps_are_flagged_not_converged_and_the_default_is_not(digits_cnn):
    model, x, y = digits_cnn
    x, y = x[:N], y[:N]
    options = dict(eps=EPS, attacks=ATTACKS, clip_values=(0, 1), batch_size=N, verbose=0)
    two = gradkit.evaluate(model, x, y, steps=2, check_convergence=True, **options)
    plain = gradkit.evaluate(model, x, y, steps=2, **options)
    fell = [i for i, b in enumerate(two.broken_by) if b and b.endswith(" (x2)")]
    flags = {f["name"]: f for f in two.flags}
    assert (
        fell and f"{len(fell)} of the {int(plain.robust.sum())} points" in flags["not_converged"]["message"]
    )
    assert "still_improving" in flags
    assert np.flatnonzero(plain.robust & ~two.robust).tolist() == fell  # the reruns' points
    assert not (two.robust & ~plain.robust).any()
    assert two.robust_accuracy == pytest.approx(plain.robust_accuracy - len(fell) / N)  # counted broken
    assert list(two.per_attack) == [*ATTACKS, "apgd-ce (x2)", "apgd-t (x2)"] and two.attacks == ATTACKS
    assert "loss_tail" not in plain.per_attack["apgd-ce"] and not {"not_converged", "still_improving"} & {
        f["name"] for f in plain.flags
    }
    shard = gradkit.evaluation.evaluate_shard(model, x, y, epsilons=[EPS], steps=2, check_convergence=True,
                                              **{k: v for k, v in options.items() if k != "eps"})  # fmt: skip
    again = shard.evaluations()[0]
    assert again.broken_by == two.broken_by and again.flags == two.flags
    default = gradkit.evaluate(model, x, y, check_convergence=True, **options)  # steps=100
    assert not {"not_converged", "still_improving"} & {f["name"] for f in default.flags}
    assert default.per_attack["apgd-ce (x2)"]["n_points"] == int(default.robust.sum()) > 0


def test_the_fingerprint_names_check_convergence_only_when_set():
    config = _config(["apgd-ce"])
    off = _plan.Config(**{**vars(config), "check_convergence": False})
    assert _state._version_fingerprint(config) == {"version": "custom", "check_convergence": True}
    assert _state._version_fingerprint(off) == {"version": "custom"}


def test_check_convergence_must_be_a_bool(digits_cnn):
    model, x, y = digits_cnn
    with pytest.raises(TypeError, match="check_convergence"):
        gradkit.evaluate(model, x[:4], y[:4], eps=0.1, attacks="fgsm", check_convergence="yes", verbose=0)
