"""``python -m gateway.worker``: a data-plane worker (its control process starts it)."""

import sys

from gateway.worker.main import main

if __name__ == "__main__":  # not on import (a walk of the package imports every module)
    sys.exit(main())
