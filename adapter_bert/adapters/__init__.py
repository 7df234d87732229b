"""Adapter families (the layers inside a block), tuning modes, fusion, named and multi-task
adapters, ResAdapter side networks, adapter files and the transformers bridge.
"""
