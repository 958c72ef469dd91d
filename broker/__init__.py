"""The OSB v2.17 broker (HTTP edge)."""
