"""`python -m xdscheduler`: the `xds` command."""

import sys

from xdscheduler.entry import main

sys.exit(main())
