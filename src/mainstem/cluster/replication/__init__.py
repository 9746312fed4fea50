"""Partition replication: elections and roles, the leader's feed and its followers,
forwarded appends, and the records of replicated streams and quorum queues' journals."""
