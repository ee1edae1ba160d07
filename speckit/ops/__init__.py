"""Operations users run: fetch, inspect, convert, quantize, plan, validate, train, demo.

Each takes resolved inputs, asks speckit.core and writes through speckit.io; never imports the CLI.
"""
