"""Repairs: one dtype policy for a model (`fix`), casts at module borders (`guard`), keep-in-fp32."""
