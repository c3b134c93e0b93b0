"""DFlash additions to a vLLM image: a general plugin (`plugin`) and a readiness probe (`probe`).

Kept empty on purpose: vLLM imports the plugin in every process, and the probe must run without vLLM.
"""
