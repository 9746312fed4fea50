"""Cluster-wide metadata: the catalog feed, and Iggy's numeric ids claimed in etcd."""
