"""What the API keeps for a tenant beyond a request: stored responses and the media bytes they use, on the
database and the shared files volume every gateway replica reaches."""
