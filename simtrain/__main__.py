"""``python -m simtrain``: the command line, as the ``simtrain`` script."""

import sys

from simtrain.cli.main import main

sys.exit(main())
