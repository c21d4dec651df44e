"""Shared test helpers: exact reference laws, the G-test, rule configurations and negative controls."""
