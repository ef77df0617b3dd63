"""`python -m gradkit`: the same command line as `gradkit` (see `gradkit.cli`)."""

import sys

from gradkit.cli import main

sys.exit(main())
