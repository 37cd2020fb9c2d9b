"""How the search decides: Pareto fronts, parent selection, noise ties, fidelity rungs, validation
splits, the seed."""
