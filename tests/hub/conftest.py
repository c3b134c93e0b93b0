"""Fixtures of the hub tier live in hubtools.py, importable by the tests too (a conftest module is not)."""

from hubtools import fetch_env, hub, models  # noqa: F401  (pytest finds fixtures by name here)
