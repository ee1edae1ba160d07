"""speckit: fetch, convert, quantize, size and validate speculative-decoding drafts for vLLM.

The library API is speckit.api (`import speckit.api as sk; sk.convert(...)`): plain functions,
one per operation. speckit.convert, .fetch, .inspect, .plan, .quant and .validate are the
operation packages that define them.
"""

__version__ = "0.1.0"
