"""I/O: safetensors reading and writing, the Hub, the reference resolver, the vLLM child process.

Modules here may import speckit.core, never an operation package or speckit.cli.
"""
