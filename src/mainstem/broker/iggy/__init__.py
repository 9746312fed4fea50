"""The Iggy protocol's model: the numeric ids Iggy gives namespaces and streams, and
its consumer groups."""
