"""``agentenvs sandbox serve``: SandboxFusion's HTTP API over any agentenvs backend.

- ``app``: the FastAPI app, response mapping and ``serve``.
- ``request``: the ``/run_code`` request model and its validation.
- ``limits``: client-asked limits against the server's (lower only).
- ``body``: the request-body size limit, enforced while reading.
"""
