"""``python -m dpcausal``."""

from dpcausal.cli import main

main()
