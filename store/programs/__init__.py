"""Programs as functai 1.2.0 describes them: signatures and shapes, code, tools, approvals."""
