"""The call log functai reads and writes, and learning from it: ratings, rated rows, splits, merges."""
