"""The only code that talks to the API server: requests, field ownership, and the server's answers as typed errors."""
