"""``python -m taskrunner``: the same command line as ``taskrunner``."""

from taskrunner.cli import main

raise SystemExit(main())
