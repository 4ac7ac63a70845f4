"""Pieces every other package shares: errors, logging, settings. Imports nothing of the project."""
