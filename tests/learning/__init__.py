"""The call log and learning from it: ratings, rated rows, splits, merges, evaluations."""
