"""The Conversations API (`/v1/conversations`): named conversations whose items a response replays and extends."""
