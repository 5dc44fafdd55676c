"""The composition root: the app factory, the state the lifespan builds, and the `tessera` command."""
