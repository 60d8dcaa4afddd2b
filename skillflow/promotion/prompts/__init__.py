"""Versioned prompt texts (the file stem is the version stamped on each skill)."""
