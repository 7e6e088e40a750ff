"""Safe rollouts: a candidate pool tried beside a model's pool, judged by its answers."""
