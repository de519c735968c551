"""Numerical solvers: strongly convex ERM to a stated gradient tolerance, closed forms."""
