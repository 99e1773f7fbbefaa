"""``python -m celeritas_cli``: the ``celeritas`` command."""

import sys

from celeritas_cli.main import main

sys.exit(main())
