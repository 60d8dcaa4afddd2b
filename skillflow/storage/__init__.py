"""Storage on SQLAlchemy Core: schema, engines, migrations and set-based queries."""
