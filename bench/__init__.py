"""Benchmarks and reliability suites (run with scripts/bench.sh and scripts/reliability.sh)."""
