"""Prefect tasks: one stage each; they take ids and pydantic values, never sessions or engines."""
