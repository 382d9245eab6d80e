"""The deterministic event kernel and the simulations that need nothing but it (a closed queueing network of
asynchronous workers and servers): below the cost model, which runs the bounded-staleness case on it."""
