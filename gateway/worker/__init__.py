"""The data plane: what a worker process runs to serve requests, and nothing else."""
