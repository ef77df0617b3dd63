"""The study's results as text (`gradkit.study._table`): the header's line on the attacks."""


def test_study_header_says_when_the_standard_evaluation_skips_apgd_t():
    from gradkit.study import _table

    config = {"attacks": ["standard"], "apgd_steps": 10, "square_queries": 200}
    assert "apgd-ce, apgd-t, fab-t 10 steps, square 200" in _table._attacks(config, 10)
    three = _table._attacks(config, 3)
    assert "apgd-ce, fab-t 10 steps (apgd-t skipped: 3 classes), square 200" in three
    assert "apgd-ce 10 steps (apgd-t, fab-t skipped: 2 classes)" in _table._attacks(config, 2)
