"""Alembic environment: runs on the connection that db.migration hands it."""
from alembic import context

from db import models

config = context.config
target_metadata = models.Base.metadata


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is None:
        from sqlalchemy import create_engine
        engine = create_engine(config.get_main_option("sqlalchemy.url"))
        with engine.begin() as conn:
            _run(conn)
        return
    _run(connection)


def _run(connection) -> None:
    context.configure(connection=connection, target_metadata=target_metadata,
                      render_as_batch=True, compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise SystemExit("offline migrations are not supported; run berth-manage db sync")
run_migrations_online()
