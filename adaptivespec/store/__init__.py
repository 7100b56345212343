"""Durable controller state: SQLAlchemy 2.0 models, Alembic migrations, and a repository."""
