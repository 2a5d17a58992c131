"""``python -m ttscli ...``: the same command as the ``ttscli`` script, for environments whose
scripts folder is not on PATH."""
import sys

from ttscli.cli import main

sys.exit(main())
