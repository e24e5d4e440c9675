"""One worker process: the Faust app, its start-up and bounded stop around broker outages, what its
agents share, and the error policy."""
