"""stackcurate: Software Heritage archives to trainer-ready tokenized shards."""

__version__ = "0.1.0"
