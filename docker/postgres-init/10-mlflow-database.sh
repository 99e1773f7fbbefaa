#!/bin/sh
# MLflow's own role and database beside Airflow's (both keep an `alembic_version` table, so they
# cannot share one). The postgres image runs this once, when its data volume is initialized;
# the password comes from MLFLOW_DB_PASSWORD (docker/.env), passed as a psql variable.
set -eu
: "${MLFLOW_DB_PASSWORD:?MLFLOW_DB_PASSWORD is not set}"
psql --set=ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
     --set=mlflow_password="$MLFLOW_DB_PASSWORD" <<'SQL'
CREATE ROLE mlflow LOGIN PASSWORD :'mlflow_password';
CREATE DATABASE mlflow OWNER mlflow;
SQL
