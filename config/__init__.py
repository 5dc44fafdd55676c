"""Settings, low in the stack: every package may read them; none of them reads the code above it."""
