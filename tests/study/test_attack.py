"""The study's attacks (`gradkit.study._attack`): the minimum-norm attacks break each point at its norm."""

import numpy as np

from oracles.linear import X, curved, exact, labels, labels_of


def test_study_fmn_and_fab_break_each_point_at_its_norm():
    from gradkit.study import Dataset, StudyConfig, _attack, _outdir
    from gradkit.study._attack import WORST

    model = curved()
    y = labels(model)
    data = Dataset("toy", X, y, X, y, 2)
    config = StudyConfig.from_options(attacks=["fmn"], epsilons=[0, 0.02, 0.05], apgd_steps=30)
    record = _attack.new_record(labels_of(model, X) == y, config.attacks)
    accuracy = {}
    for eps in config.epsilons:
        rows, _ = _attack.attack_at(model, "m", data, eps, record, config, None)
        accuracy[eps] = {r["attack"]: r["accuracy"] for r in rows}
    norms = np.array([np.inf if v is None else v for v in record["min_norm"]["fmn"]])
    np.testing.assert_allclose(norms, exact(X, y, np.inf), rtol=0.01)
    for eps in config.epsilons:
        assert accuracy[eps] == {"worst_case": np.mean(norms > eps), "fmn": np.mean(norms > eps)}
    samples = _outdir.sample_rows({"samples": {"m": record}}, y)
    assert [r["m_fmn_norm"] for r in samples] == record["min_norm"]["fmn"]
    assert _attack.work(config, 0.02) == 15.0  # one run of 30 steps over the two eps > 0
    fab = StudyConfig.from_options(attacks=["fab"], epsilons=[0, 0.02, 0.05], apgd_steps=30)
    record = _attack.new_record(labels_of(model, X) == y, fab.attacks)
    found = {eps: _attack.attack_at(model, "m", data, eps, record, fab, None)[0] for eps in fab.epsilons}
    fab_norms = np.array([np.inf if v is None else v for v in record["min_norm"]["fab"]])
    np.testing.assert_allclose(fab_norms, exact(X, y, np.inf), rtol=0.01)
    for eps, rows in found.items():
        assert {r["attack"]: r["accuracy"] for r in rows} == {
            a: np.mean(fab_norms > eps) for a in (WORST, "fab")
        }
    samples = _outdir.sample_rows({"samples": {"m": record}}, y)
    assert [r["m_fab_norm"] for r in samples] == record["min_norm"]["fab"]


def test_progress_weighs_each_step_by_its_work():
    from gradkit import study
    from gradkit.study import _attack

    config = study.StudyConfig(quick=True, pgd_steps=10, apgd_steps=5, square_queries=90)
    assert _attack.work(config, 0.0) == 0.0  # nothing runs at eps 0
    # fgsm 1 + pgd 10 + standard (apgd-ce 5 + apgd-t and fab-t 5 x 9 targets each + square 90 / 3)
    assert _attack.work(config, 0.1) == 1 + 10 + (5 + 45 + 45 + 30)
    # a boosted model of 3 members: every network runs, the gradient attacks with two objectives
    assert _attack.work(config, 0.1, n_members=3) == 3 * (1 + 10 + 2 * (5 + 45 + 45) + 30)
    assert _attack.work(config, 0.3, n_classes=4) == 1 + 10 + (5 + 15 + 15 + 30)  # three target classes
    assert _attack.work(config, 0.3, n_classes=3) == 1 + 10 + (5 + 10 + 30)  # APGD-T needs 4 classes
