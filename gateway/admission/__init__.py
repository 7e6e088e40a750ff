"""Admission: a model's bound on requests in flight (over it the request is shed), split among
its tenants by weight, and tenants' own limits in flight and per second."""
