"""The tracking store's one-line errors for database stores: what SQLAlchemy or Alembic raise
becomes a sentence naming the store (input error), or a transient error for a database that
cannot be reached or is locked, never a traceback."""

from __future__ import annotations

import pytest

pytest.importorskip("sqlalchemy")

import sqlalchemy.exc

from celeritas_core.errors import CeleritasInputError
from tasks import tracking

URI = "sqlite:////srv/mlflow.db"


def _raise_inside_translated(exc: BaseException) -> None:
    with tracking.store._translated():
        raise exc


def test_a_database_error_is_one_line_naming_the_store(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", URI)
    orig = Exception("file is not a database")
    error = sqlalchemy.exc.DatabaseError("SELECT name FROM sqlite_master\nWHERE type='table'", None, orig)
    with pytest.raises(CeleritasInputError) as info:
        _raise_inside_translated(error)
    assert str(info.value) == f"MLFLOW_TRACKING_URI={URI}: not a usable MLflow store (file is not a database)"


def test_an_unreachable_or_locked_database_is_transient(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", URI)
    error = sqlalchemy.exc.OperationalError("SELECT 1", None, Exception("database is locked"))
    with pytest.raises(tracking.TransientTrackingError) as info:
        _raise_inside_translated(error)
    assert str(info.value) == f"MLflow tracking server {URI} unreachable: database is locked"


def test_other_errors_pass_through(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", URI)
    with pytest.raises(KeyError):
        _raise_inside_translated(KeyError("x"))
