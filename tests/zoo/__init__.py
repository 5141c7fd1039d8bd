"""The architecture zoo: tiny models built from every config the pinned libraries ship (see models.py)."""
