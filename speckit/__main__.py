"""`python -m speckit`: the speckit command line (what torchrun starts for each training rank).

The guard keeps importing this module (multiprocessing, tools) from running the CLI.
"""

from speckit.cli import main

if __name__ == "__main__":
    main(prog_name="speckit")
