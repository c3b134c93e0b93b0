"""The process: configuration, CLI, kopf start-up, metrics, memory, watch health and the watched scope."""
