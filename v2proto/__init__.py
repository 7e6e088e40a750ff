"""What the gateway and the replicas agree on: the V2 protocol and the model manifest.

The Open Inference Protocol (KServe V2 REST) messages (codec, tensors, signatures, requested
outputs) and the manifest that pins model files, in one package that imports neither side;
the gateway and the replica server both import it, and never each other (`lint-imports`).
"""
