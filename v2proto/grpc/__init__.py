"""The V2 protocol over gRPC: the vendored ``.proto`` files, their generated message modules
(``generate.sh``), the service glue (`service`) and the conversion between the REST bodies and
the gRPC messages (`convert`)."""
