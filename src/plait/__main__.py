"""``python -m plait``."""

from plait.cli.main import main

main()
