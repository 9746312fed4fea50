"""The BSON event protocol (mewbase-style): channels, transactions, subscriptions with
matchers, binders with queries. ``codec`` frames BSON documents, ``connection`` serves them."""
