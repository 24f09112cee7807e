"""``python -m coordinator.cli``: the ``txnlog`` command line."""

import sys

from coordinator.cli import main

sys.exit(main())
