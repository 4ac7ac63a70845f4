"""The record log: every store's contract, the log's rules, reading, streams, identities, copies."""
