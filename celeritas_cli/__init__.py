"""The ``celeritas`` command line: the top layer, and the only code that imports every other one.

Layers (checked by ``lint-imports``, run by ``make test``): ``celeritas_cli`` above ``dags`` above
``tasks`` above ``celeritas_tf`` above ``celeritas_core``; each imports only the layers below it.
"""
