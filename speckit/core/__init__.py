"""Pure knowledge: method specs, layout detection, plan math, registry schema, spec-config.

Nothing here touches the filesystem, the network or torch at import time.
"""

from pathlib import Path

# where package data (registry.toml, data/) lives; computing a path reads nothing
PACKAGE_DIR = Path(__file__).resolve().parent.parent
