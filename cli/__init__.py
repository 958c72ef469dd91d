"""The ``opbroker`` command line."""
