"""What every `gradkit` command's parser shares (`gradkit.cli._parser`): a value starting with "-" and a
digit is a number (or a list of numbers, a fraction), never an option, so no number option needs "="."""

import pytest

from gradkit import cli

NEGATIVE = [
    (["evaluate", "m", "d", "--eps", "0.1", "--clip-values", "-4,14"], "clip_values", [-4.0, 14.0]),
    (["evaluate", "m", "d", "--eps", "0.1", "--clip-values", "-.5,.5"], "clip_values", [-0.5, 0.5]),
    (["evaluate", "m", "d", "--eps", "0.1", "--seed", "-1"], "seed", -1),
    (["evaluate", "m", "d", "--eps", "0.1", "--steps", "-3"], "steps", -3),
    (["evaluate", "m", "d", "--eps", "0.1", "--n-queries", "-3"], "n_queries", -3),
    (["evaluate", "m", "d", "--eps", "0.1", "--batch-size", "-16"], "batch_size", -16),
    (["evaluate", "m", "d", "--eps", "0.1", "--n-points", "-2"], "n_points", -2),
    (["evaluate", "m", "d", "--eps", "0.1", "--eot-iter", "-2"], "eot_iter", -2),
    (["evaluate", "m", "d", "--eps", "0.1", "--n-classes", "-2"], "n_classes", -2),
    (["study", "--epsilons", "-0.1,0.2"], "epsilons", [-0.1, 0.2]),
    (["study", "--adv-eps", "-.5"], "adv_eps", -0.5),
    (["study", "--seed", "-7"], "seed", -7),
    (["study", "--devices", "-1"], "devices", -1),
]


@pytest.mark.parametrize("argv, dest, value", NEGATIVE)
def test_negative_numbers_and_lists_parse_without_equals(argv, dest, value):
    """argparse alone reads "-4,14" as an unknown option ("expected one argument"); the range checks of
    each command then refuse what is out of range, naming the flag (tests/cli/test_evaluate.py)."""
    args = cli.build_parser().parse_args(argv)
    assert getattr(args, dest) == value
    i = len(argv) - 2  # each case ends with the option and its negative value: the same with "="
    assert getattr(cli.build_parser().parse_args([*argv[:i], f"{argv[i]}={argv[i + 1]}"]), dest) == value


def test_a_negative_number_before_the_positionals_stays_a_value(capsys):
    args = cli.build_parser().parse_args(["evaluate", "--clip-values", "-1,1", "m", "d", "--eps", "0.1"])
    assert (args.clip_values, args.model, args.data) == ([-1.0, 1.0], "m", "d")


def test_an_option_missing_its_value_is_still_a_usage_error(capsys):
    assert cli.main(["evaluate", "m", "d", "--eps", "0.1", "--clip-values"]) == 2
    assert "argument --clip-values: expected one argument" in capsys.readouterr().err
    assert cli.main(["evaluate", "m", "d", "--eps", "0.1", "--clip-values", "--seed", "1"]) == 2
    assert "argument --clip-values: expected one argument" in capsys.readouterr().err


@pytest.mark.parametrize(
    "text, expected",
    [("0.1", [0.1]), ("8/255", [8 / 255]), ("0, 4/255,8/255", [0.0, 4 / 255, 8 / 255]), ("0", [0.0])],
)
def test_eps_takes_numbers_fractions_and_lists(text, expected):
    args = cli.build_parser().parse_args(["evaluate", "m", "d", "--eps", text])
    assert args.eps == pytest.approx(expected, rel=0, abs=0)


@pytest.mark.parametrize(
    "text, why",
    [
        ("8/0", "(8/0 has a zero denominator)"),
        ("0.1,8/0", "(8/0 has a zero denominator)"),
        ("-1", "(-1 is not a finite number >= 0)"),
        ("-8/255", "(-8/255 is not a finite number >= 0)"),
        ("nan", "(nan is not a finite number >= 0)"),
        ("inf", "(inf is not a finite number >= 0)"),
        ("abc", "('abc' is not a number)"),
        ("8/x", "('8/x' is not a number or a fraction)"),
        ("0.1,", "('' is not a number)"),
    ],
)
def test_a_bad_eps_is_a_usage_error_naming_eps_and_the_item(capsys, text, why):
    assert cli.main(["evaluate", "m", "d", "--eps", text]) == 2  # before MODEL or DATA is looked at
    err = capsys.readouterr().err
    assert "`--eps` must be comma-separated numbers >= 0 (fractions such as 8/255 allowed)" in err
    assert f"Received: --eps {text} {why}" in err and "Traceback" not in err
