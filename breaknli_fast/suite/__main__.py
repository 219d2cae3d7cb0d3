"""``python -m breaknli_fast.suite``: ``breaknli-fast suite`` where the package is not installed (a checkout on
PYTHONPATH, as on a lent GPU machine)."""

import sys

from breaknli_fast.suite.main import main

sys.exit(main())
