"""Utilities shared by testbed, theory, figures and llm_scale: statistics, sequential designs, atomic files.

Nothing here knows about tasks, models or stabilizers, so any package of the project may import it.
"""
