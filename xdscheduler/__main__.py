"""`python -m xdscheduler`: the `xds` command."""

from xdscheduler.entry import console

console()
