"""functai 1.2.0 and Threadline on one conversation, both ways."""
