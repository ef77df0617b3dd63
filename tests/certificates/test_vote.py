"""Vote certificates (`certificates.vote`): hand-worked weights and radii, threshold members whose exact
radii and whose vote's exact radius are known in closed form, a brute-force check of the condition at
every radius, the weights of ensembles and boosted models, and argument checks."""

import numpy as np
import pytest

import gradkit
from gradkit.certificates import member_weights, vote_certificate
from helpers import models


def threshold(theta):
    """A two-feature member that says class 1 iff x0 > theta: its exact L2 radius is |x0 - theta|."""
    return models.linear([[0.0, 1.0], [0.0, 0.0]], [theta, 0.0])


def test_hand_worked_weights_and_radii():
    weights = [0.5, 0.3, 0.2]
    classes = np.array([[1, 1, 1, 0], [1, 1, -1, 1], [0, 1, 1, 1]])
    radii = np.array([[1.0, 1.0, 2.0, 5.0], [2.0, 2.0, 0.0, 10.0], [3.0, 3.0, 0.5, 10.0]])
    cert = vote_certificate(classes, radii, weights)
    # point 0: r = 1: W1 = 0.8 > W0 0.2 + U 0; r = 2: W1 = 0.3 < W0 0.2 + U 0.5 -> R = 1, class 1
    # point 1: r = 1: 1.0 > 0; r = 2: W1 = 0.5, U = 0.5, not strictly more -> R = 1
    # point 2: r = 0.5: W1 = 0.7 > U 0.3; r = 2: W1 = 0.5 = U 0.5 -> R = 0.5
    # point 3: r = 5: W0 = 0.5 = W1 0.5 -> never: class -1, radius 0
    np.testing.assert_array_equal(cert.classes, [1, 1, 1, -1])
    np.testing.assert_allclose(cert.radii, [1.0, 1.0, 0.5, 0.0])
    np.testing.assert_array_equal(cert.classes_at(0.75), [1, 1, -1, -1])
    np.testing.assert_array_equal(cert.certified([1, 0, 1, 1], 0.5), [True, False, True, False])


def test_threshold_members_give_the_closed_form():
    # three equal members at thresholds 0, 1, 2 on x0: at x0 = 1.6 they vote 1, 1, 0 with exact radii
    # 1.6, 0.6, 0.4. The vote (2 of 3 for class 1) flips only where x0 crosses 1: its exact radius 0.6,
    # and the certificate: at r = 0.6 W1 = 2/3 > U = 1/3, at r = 1.6 W1 = 1/3 < U = 2/3.
    thetas = np.array([0.0, 1.0, 2.0])
    ensemble = gradkit.WeightedEnsemble([threshold(t) for t in thetas])
    x = np.array([[1.6, 0.0], [-0.5, 0.0], [2.2, 0.0], [1.2, 0.0]], "float32")
    classes = np.stack([m.predict(x, verbose=0).argmax(axis=1) for m in ensemble.models])
    radii = np.abs(x[:, 0][None, :] - thetas[:, None]).astype(np.float64)
    cert = vote_certificate(classes, radii, ensemble)
    np.testing.assert_array_equal(cert.classes, ensemble.predict(x))
    # x0 = -0.5: radii 0.5, 1.5, 2.5, all for class 0; at r = 1.5 W0 = 2/3 > U = 1/3, at r = 2.5 W0 =
    # 1/3 < 2/3: R = 1.5, where the vote flips (two members say 1 past x0 = 1). x0 = 2.2: radii 2.2,
    # 1.2, 0.2 for class 1: R = 1.2 (the flip at x0 = 1). x0 = 1.2: radii 1.2, 0.2 (class 1) and 0.8
    # (class 0): at r = 0.8 W1 = 1/3 = W0 and U = 1/3, so R = 0.2 (the flip at x0 = 1).
    exact = [0.6, 1.5, 1.2, 0.2]  # the distance from x0 to the nearest threshold that flips the vote
    np.testing.assert_allclose(cert.radii, exact, rtol=1e-6)


def _brute_force(classes, radii, w, n_classes, r):
    """(*) at radius r, straight from its definition."""
    out = []
    for i in range(classes.shape[1]):
        alive = (classes[:, i] >= 0) & (radii[:, i] >= r)
        wc = np.array([w[alive & (classes[:, i] == c)].sum() for c in range(n_classes)])
        u = w.sum() - wc.sum()
        y = int(np.argmax(wc))
        out.append(y if wc[y] > np.delete(wc, y).max() + u else -1)
    return np.array(out)


def test_the_condition_holds_exactly_up_to_the_radius_and_never_beyond():
    rng = np.random.RandomState(0)
    k, m, c = 6, 200, 3
    classes = rng.randint(-1, c, size=(k, m))
    radii = np.where(classes >= 0, rng.choice([0.5, 1.0, 1.5, 2.0, 3.0], size=(k, m)), 0.0)
    w = rng.rand(k)
    cert = vote_certificate(classes, radii, w, n_classes=c)
    for r in (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5):
        np.testing.assert_array_equal(cert.classes_at(r), _brute_force(classes, radii, w, c, r))
    assert 0 < np.mean(cert.classes >= 0) < 1


def test_random_thresholds_never_certify_past_the_exact_radius():
    rng = np.random.RandomState(1)
    for _ in range(20):
        thetas, w, x0 = rng.uniform(-2, 2, 5), rng.rand(5), rng.uniform(-2, 2)
        classes = (x0 > thetas).astype(int)[:, None]
        cert = vote_certificate(classes, np.abs(x0 - thetas)[:, None], w)
        grid = x0 + np.linspace(-4, 4, 16001)
        ones = (grid[:, None] > thetas) @ w
        vote = (ones > w.sum() - ones).astype(int)  # the vote along x0 (ties to class 0)
        flips = np.abs(grid[vote != vote[8000]] - x0)
        exact = flips.min() if len(flips) else np.inf
        assert cert.radii[0] <= exact + 1e-3
        if cert.classes[0] >= 0:
            assert cert.classes[0] == vote[8000]


def test_member_weights_of_ensembles_and_boosted_models():
    members = [threshold(0.0), threshold(1.0)]
    got, w = member_weights(gradkit.WeightedEnsemble(members, [0.7, 0.3]))
    assert got == members and w.tolist() == [0.7, 0.3]
    boosted = gradkit.AdaBoostM1(lambda: None)
    with pytest.raises(ValueError, match="fitted"):
        member_weights(boosted)
    boosted.estimators_, boosted.estimator_weights_ = members, np.array([1.2, 0.4])
    got, w = member_weights(boosted)
    assert got == members and w.tolist() == [1.2, 0.4]
    cert = vote_certificate(np.array([[1], [0]]), np.array([[2.0], [1.0]]), boosted)
    assert cert.classes.tolist() == [1] and cert.radii.tolist() == [2.0]  # 1.2 > 0.4 at r = 1 and at r = 2
    assert member_weights(members[0])[1].tolist() == [1.0]
    with pytest.raises(TypeError, match="`model`"):
        member_weights("nope")


@pytest.mark.parametrize(
    ("classes", "radii", "weights", "name"),
    [
        (np.zeros((2, 3), int), np.zeros((2, 4)), [1, 1], "member_classes"),
        (np.zeros((2, 3), int), np.zeros((2, 3)), [1, 1, 1], "member_classes"),
        (np.full((2, 3), -2), np.zeros((2, 3)), [1, 1], "member_classes"),
        (np.zeros((2, 3)), np.zeros((2, 3)), [1, 1], "member_classes"),
        (np.zeros((2, 3), int), -np.ones((2, 3)), [1, 1], "member_radii"),
        (np.zeros((2, 3), int), np.zeros((2, 3)), [0, 0], "weights"),
        (np.zeros((2, 3), int), np.zeros((2, 3)), [1, -1], "weights"),
    ],
)
def test_bad_arguments_name_themselves(classes, radii, weights, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        vote_certificate(classes, radii, weights)
    with pytest.raises(ValueError, match="`n_classes`"):
        vote_certificate(np.zeros((1, 1), int), np.ones((1, 1)), [1.0], n_classes=1)
