"""Ingest's sources: what reads each kind of input (fetch.py: the content store of The Stack v2)."""
