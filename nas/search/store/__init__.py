"""The durable study: SQLite schema, candidate rows, leases, exports."""
