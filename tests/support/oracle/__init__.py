"""The static checker of the Oracle SQL in sql/oracle (test-only: it needs the dev-only sqlglot)."""
