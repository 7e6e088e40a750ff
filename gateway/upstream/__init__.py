"""Everything that talks to replicas: replica state and pools, with transport/, probes/ and
discovery/ as subpackages."""
