"""Renderers: they read a Report and never compute."""
