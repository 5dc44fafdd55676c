"""The HTMX web console: tenants sign in with an API key and test prompts in the playground."""
