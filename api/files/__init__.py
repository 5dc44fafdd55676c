"""`/v1/files`: the wire structs of uploaded files."""
