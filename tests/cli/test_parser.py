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
