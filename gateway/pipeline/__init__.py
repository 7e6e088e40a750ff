"""The request pipeline: one class per layer, each holding the next; built in `build.py`."""
