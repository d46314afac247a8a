"""A delay-controlled simulator for asynchronous RL, and the stabilizers it tests."""
