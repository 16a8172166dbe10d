"""Meltano state backend for ClickHouse; the work is done by a bundled Java bridge."""
