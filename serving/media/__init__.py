"""Media loaders: one per modality, each with `load_bytes`, `load_base64` and `load_url`."""
