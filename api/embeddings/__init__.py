"""`/v1/embeddings`: OpenAI's embeddings request on an embedding pool."""
