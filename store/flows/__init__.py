"""Guided flows: a definition of steps, its progress in the log, its exchanges as turns."""
