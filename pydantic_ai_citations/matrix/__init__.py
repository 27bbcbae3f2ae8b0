"""The capability matrix: measured per provider API."""
