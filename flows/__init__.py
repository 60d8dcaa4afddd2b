"""Prefect flows: one flow per module, the module stem is the function name and the deployment name."""
