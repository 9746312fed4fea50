"""Segment store wire protocol (Pravega-style appends in blocks, byte-offset reads)."""
