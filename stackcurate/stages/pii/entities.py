"""The PII types, shared by the recognizers, the rules, the model and its recipe (no presidio import, so the
CLI and config load fast)."""

EMAIL, IP_ADDRESS, KEY, PASSWORD, NAME, USERNAME = "EMAIL", "IP_ADDRESS", "KEY", "PASSWORD", "NAME", "USERNAME"
ENTITIES = (EMAIL, IP_ADDRESS, KEY, PASSWORD, NAME, USERNAME)
DETECTOR = "detector"  # the recognition_metadata key naming the rule or model that found a span
