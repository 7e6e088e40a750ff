"""Open Inference Protocol (KServe V2) messages as the gateway needs them."""
