"""Which replicas a pool has, when DNS names them: look-ups and the loop that follows them."""
