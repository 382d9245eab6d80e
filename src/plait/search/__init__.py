"""The planner: a declared space of plans, named pruning rules, objectives, ranking and explanations."""
