"""`/v1/chat/completions`: the wire structs, the parser, the one chat path (route and playground) and its
renderings as one body or SSE chunks."""
