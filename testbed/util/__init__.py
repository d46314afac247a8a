"""Utilities shared by testbed, theory, figures and llm_scale: statistics, sequential designs, atomic files, the seed
scheme, provenance (git commit, machine), progress display, the one-line usage error and the scorecard format.

Nothing here runs a task, a model or a stabilizer, and nothing here imports a module of the project outside this
package, so any package of the project may import it (tests/unit/test_imports.py checks both directions).
"""
