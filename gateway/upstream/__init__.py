"""Everything that talks to replicas: transports, replica state, pools, probes."""
