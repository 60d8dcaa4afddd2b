"""skillflow: turn an agent's own successful tool-calling runs into reviewed, monitored skills."""

__version__ = "0.1.0"
