"""The data plane's HTTP/1.1 server: httptools on uvloop, one task per request, no ASGI.

`server.HttpServer` listens and drains; `protocol.HttpProtocol` parses a connection and runs
each request's handler (`router.Router` picks it) as ``handler(request, answer)`` with a
`request.Request` and an `answer.Answer`; `limits.ClientLimits` bounds what one client may
take; `proxy.UnixProxy` is a handler that forwards a request to an HTTP/1.1 server on a Unix
socket (the control process) and streams its answer back.
"""
