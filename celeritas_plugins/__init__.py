"""Airflow plugins of Celeritas, registered through the ``airflow.plugins`` entry point (pyproject.toml)."""
