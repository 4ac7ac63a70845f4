"""The record log's storage: a folder, PostgreSQL, memory; blobs, streams, identity, migrations, transfer."""
