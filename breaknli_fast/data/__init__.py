"""Data: labels, normalisation, loaders."""
