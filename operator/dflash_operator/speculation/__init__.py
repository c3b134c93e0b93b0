"""Speculation on live traffic: vLLM's counters, the acceptance window, SpeculationHealthy and Fallback."""
