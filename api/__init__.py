"""The HTTP surface: one subpackage per endpoint family (chat/, responses/), routes, auth, errors, SSE."""
