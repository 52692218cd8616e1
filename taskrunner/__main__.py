"""``python -m taskrunner``: the same command line as ``taskrunner``."""

from taskrunner._cli import main

raise SystemExit(main())
