"""The verified in-process fallback model: manifest check, golden set, watcher and V2 glue.

It answers, degraded, when the primaries cannot; so it is trusted only while its file matches
the manifest's SHA-256 and it passes its golden set, and it says why whenever it is refused.
"""
