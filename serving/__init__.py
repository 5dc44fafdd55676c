"""The request path: the lease (service, completion), ingest, routing, admission, pipeline, metrics; engines/
and encoders/ below it."""
