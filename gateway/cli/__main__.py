"""``python -m gateway.cli``: the ``gateway`` command."""

import sys

from gateway.cli import main

if __name__ == "__main__":
    # not on import (a walk of the package imports every module)
    sys.exit(main())
