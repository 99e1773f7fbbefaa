"""``python -m celeritas_cli``: the ``celeritas`` command."""

from celeritas_cli.main import run

run()
