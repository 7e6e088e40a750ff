"""The gateway's HTTP surface: a lean ASGI infer path plus FastAPI for everything else."""
