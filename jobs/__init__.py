"""Background work that outlives a request (background responses, batches): a job table claimed under leases by
every gateway replica's runner."""
