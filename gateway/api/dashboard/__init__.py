"""The gateway's live dashboard: a static page and its scripts, served from package data.

The page (``static/index.html``) holds no state of its own: its scripts poll
``/admin/state``, ``/admin/history``, ``/admin/fleet``, ``/admin/rollouts`` and ``/slo`` (same
origin) and draw the fleet, the replica tiles with operator buttons, charts of the last
minutes (inline SVG), the rollouts, the SLO table and the event timeline. No external asset of
any kind (no CDN, fonts or images): it works on an air-gapped host and leaks nothing to third
parties. `assets` reads the files once; `routes` serves them with their headers.
"""

from __future__ import annotations

from gateway.api.dashboard.routes import PAGE_PATHS, install_dashboard

__all__ = ["PAGE_PATHS", "install_dashboard"]
