"""`python -m cronstream.cli`: the same as the `cronstream` command."""

import sys

from cronstream.cli import main

sys.exit(main())
