"""HTTP routes: thin controllers that parse, authorize and call the serving layer."""
