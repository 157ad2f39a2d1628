"""Optimal joint software pipelining + warp specialization (Twill), standalone.

Owns the dependence-graph type, ResMII/RecMII bounds, cost normalization, the joint CP-SAT model,
the paper-literal time-indexed model, the II search (Algorithm 1) and infeasibility explanations.
Imports nothing else of the project: a graph goes in, a schedule comes out.
"""
