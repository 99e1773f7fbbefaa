"""``[core] hostname_callable`` for the integration tests' workers: both run on this machine, so
each reports the name in ``CELERITAS_IT_HOSTNAME`` (``default-worker``, ``gpu-worker``) as the
hostname of the task instances it runs."""

from __future__ import annotations

import os
import socket


def from_environment() -> str:
    """``CELERITAS_IT_HOSTNAME``, else this machine's name."""
    return os.environ.get("CELERITAS_IT_HOSTNAME") or socket.getfqdn()
