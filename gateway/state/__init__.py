"""Shared gateway state: a store (in-memory or Redis) and the background sync that uses it."""
