"""HTTP surface: app factory, settings, protocol, routes, streaming, CLI."""
