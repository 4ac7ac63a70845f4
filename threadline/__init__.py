"""threadline."""
