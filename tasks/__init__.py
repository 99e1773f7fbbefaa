"""Production pipeline steps (one module per step), runnable from the CLI and from Airflow."""
