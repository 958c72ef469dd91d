"""Brokers other than opbroker's, run as separate processes for tests of code that consumes any OSB broker."""
