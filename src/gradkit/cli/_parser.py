"""What every `gradkit` command shares: the parser class whose errors become exit code 2, option types."""

import argparse


class UsageError(Exception):
    """A command line argparse refused; the message holds the usage and a pointer to --help."""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises `UsageError` instead of exiting."""

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


def word_list(text):
    """An argparse type: comma-separated words, lower-cased, empty items dropped."""
    return [item.strip().lower() for item in text.split(",") if item.strip()]


def csv(values):
    """`values` as "a,b,c" (floats with %g)."""
    return ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values)
