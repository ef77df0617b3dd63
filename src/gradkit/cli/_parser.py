"""What every `gradkit` command shares: the parser class whose errors become exit code 2, option types."""

import argparse
import math
import re

# A value starting with "-" and a digit (or "-." and a digit, or "-inf") is a number, never an option:
# gradkit's options all start with "--" and a letter, so "--clip-values -4,14", "--eps -1/2" and "--seed -1"
# parse without "=" (argparse's own pattern takes only a lone number such as -4 or -0.5).
NEGATIVE_NUMBER = re.compile(r"^-(\.?\d|inf)", re.IGNORECASE)


class UsageError(Exception):
    """A command line argparse refused; the message holds the usage and a pointer to --help."""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises `UsageError` instead of exiting, and reads a value starting with "-"
    and a digit as a (negative) number or list of numbers, not as an option (`NEGATIVE_NUMBER`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = NEGATIVE_NUMBER  # argparse's hook (every Python >= 3.11)

    def error(self, message):
        raise UsageError(
            f"{self.format_usage()}{self.prog}: error: {message}\n"
            f"Run '{self.prog} --help' for the {'options' if ' ' in self.prog else 'commands'}."
        )


def number_list(kind):
    """An argparse type: comma-separated numbers of `kind` as a list."""

    def parse(text):
        items = [item.strip() for item in text.split(",")]
        try:
            values = [kind(item) for item in items]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected comma-separated {kind.__name__}s, got {text!r}"
            ) from None
        return values

    return parse


def eps_list(flag):
    """An argparse type: comma-separated eps >= 0, each a number or a fraction such as 8/255.

    A bad item is refused naming `flag` and the item (not a number, a zero denominator, negative, NaN or
    inf): argparse turns the message into a usage error, exit code 2 before any work.
    """
    expected = f"`{flag}` must be comma-separated numbers >= 0 (fractions such as 8/255 allowed)"

    def parse(text):
        values = []
        for item in (item.strip() for item in text.split(",")):
            top, slash, bottom = item.partition("/")
            try:
                value = float(top) / float(bottom) if slash else float(top)
            except ValueError:
                why = f"{item!r} is not a number" + (" or a fraction" if slash else "")
            except ZeroDivisionError:
                why = f"{item} has a zero denominator"
            else:
                why = None if value >= 0 and math.isfinite(value) else f"{item} is not a finite number >= 0"
            if why:
                raise argparse.ArgumentTypeError(f"{expected}. Received: {flag} {text} ({why})")
            values.append(value)
        return values

    return parse


def mean_std(flag):
    """An argparse type: "MEAN/STD", each side one number or comma-separated numbers (one per channel,
    the last axis of an input), as `(mean, std)` lists; refused naming `flag` where a side is missing, not
    numbers, a std is not > 0, or the sides are lists of different lengths (a lone number broadcasts)."""
    expected = f"`{flag}` must be MEAN/STD, each a number or comma-separated numbers (one per channel)"

    def parse(text):
        top, slash, bottom = text.partition("/")
        try:
            mean, std = ([float(v) for v in side.split(",")] for side in (top, bottom))
        except ValueError:
            mean = std = None
        if not slash or mean is None:
            why = "no /" if not slash else "not numbers"
        elif not all(math.isfinite(v) for v in mean + std) or min(std) <= 0:
            why = "every value finite and every std > 0"
        elif len(mean) != len(std) and 1 not in (len(mean), len(std)):
            why = f"{len(mean)} means and {len(std)} stds"
        else:
            return mean, std
        raise argparse.ArgumentTypeError(
            f"{expected}, e.g. 0.485,0.456,0.406/0.229,0.224,0.225. Received: {flag} {text} ({why})"
        )

    return parse


def word_list(text):
    """An argparse type: comma-separated words, lower-cased, empty items dropped."""
    return [item.strip().lower() for item in text.split(",") if item.strip()]


def csv(values):
    """`values` as "a,b,c" (floats with %g)."""
    return ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values)
