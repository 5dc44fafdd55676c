"""`/v1/batches`: the request struct, reading a batch's input file, and running its lines in the background."""
