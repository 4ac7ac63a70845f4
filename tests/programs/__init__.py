"""Programs: descriptions against functai, tools, turns that act, programs with code."""
