"""Thin kopf handlers that queue keys, the work queue, and one pass: gather (indexes) -> decide -> write if changed."""
