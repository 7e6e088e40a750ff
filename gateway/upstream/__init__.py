"""Everything that talks to replicas: the transport, replica state, pools, probes."""
