"""``python -m gateway.worker``: a data-plane worker (its control process starts it)."""

import sys

from gateway.worker.main import main

sys.exit(main())
