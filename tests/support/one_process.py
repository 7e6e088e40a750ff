"""The gateway in one process (its `Gateway` whole, REST on uvicorn), for integration tests.

`gateway serve` runs a control process and data-plane workers; until the workers' lean HTTP
server lands on this branch they cannot serve, so tests that need a real gateway answering
real replicas start this instead: the same `GatewayApp` the control process serves, parsing
and answering infer requests itself (``parses=True``), on a free loopback port. Run as
``python -m tests.support.one_process CONFIG PORT``.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import uvicorn
import yaml

from gateway.api.app import GatewayApp
from gateway.config.loader import read_config
from gateway.runtime import Gateway
from gateway.telemetry.logging import configure_logging
from tests.support.processes import ManagedProcess, free_port, http_status, start_bound


class OneProcessGateway(ManagedProcess):
    def __init__(self, config: dict[str, Any], port: int) -> None:
        handle, path = tempfile.mkstemp(prefix="gateway-", suffix=".yaml")
        self.config_path = Path(path)
        with open(handle, "w") as out:
            yaml.safe_dump(config, out)
        argv = [sys.executable, "-m", "tests.support.one_process", path, str(port)]
        super().__init__(argv, name="gateway-one-process")
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    def ready(self) -> bool:
        return http_status(f"{self.url}/v2/health/ready", timeout=0.5) == 200

    def cleanup(self) -> None:
        super().cleanup()
        self.config_path.unlink(missing_ok=True)


def start_one_process_gateway(
    config: dict[str, Any], ready_timeout: float = 30.0
) -> OneProcessGateway:
    return start_bound(
        lambda: OneProcessGateway(config, free_port()), "gateway (one process)", ready_timeout
    )


def main(path: str, port: int) -> None:
    text, config = read_config(path)
    configure_logging(json=True, level="WARNING")
    app = GatewayApp(Gateway(config), config_path=path, config_text=text)
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        access_log=False,
        log_config=None,
    )


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
