"""Spending scarce GPU time where it can change the answer: the budget, the cost of a cell, the order in which
cells are measured, and the plan that puts them together (pure)."""
