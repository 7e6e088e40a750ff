"""How the gateway reaches a replica: the HTTP/1.1 client, gRPC channels, TLS, reply caps.

Transport knows endpoints and bytes, never replica state (an import contract keeps it so).
"""
