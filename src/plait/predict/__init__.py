"""Above the cost model and the simulator: one job in, one Estimate out (closed form, simulation refinement,
checks). ``cost/`` never imports ``simulate/``; this layer owns what needs both."""
