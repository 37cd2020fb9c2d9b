"""Running the search: the driver loop, executors, workers, device turns, fitting new ops."""
