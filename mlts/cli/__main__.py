"""`python -m mlts.cli ...`: the `mlts` command, for environments without the console script."""
import sys

from mlts.cli import main

sys.exit(main())
