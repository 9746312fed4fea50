"""The BSON event protocol's model: binders of documents, the projections that fold
channels into them, and the document matcher its subscriptions and queries use."""
