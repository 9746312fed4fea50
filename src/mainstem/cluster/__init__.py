"""This node's part in a cluster coordinated by etcd: `node.py` joins the parts below."""
