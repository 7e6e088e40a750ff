"""The control process: the one users start, beside the data-plane workers it supervises.

It binds the listening sockets once and hands them to its workers (`sockets`), resolves how many
workers to run (`worker_count`), starts them (`spawn`; `standby`: one started ahead, so a dead
worker's replacement serves at once) and keeps them running (`supervisor`).
"""
