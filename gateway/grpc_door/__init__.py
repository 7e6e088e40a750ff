"""The gRPC front door: the V2 service (`inference.GRPCInferenceService`) on its own port."""
