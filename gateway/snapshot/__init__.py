"""The link between the control process and its data-plane workers: the messages, their frames
on a Unix socket, and the code of both ends (the control's server, the worker's client), which
both planes import and nothing else of either plane."""
