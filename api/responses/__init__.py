"""`/v1/responses`: the wire structs, the parser that turns input items into chat turns, and the renderings as
one `response` object or typed SSE events, on the same lease as chat completions."""
