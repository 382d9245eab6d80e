"""Pictures and the HTML report: step timeline, memory per stage, Pareto front."""
