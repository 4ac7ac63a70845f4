"""Guided flows: the engine, its activities, the workflow, timers, recovery, the shell."""
