"""The conversation workflow end to end: turns, recovery, replay, context, the converter."""
