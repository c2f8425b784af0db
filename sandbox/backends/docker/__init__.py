"""The ``docker`` sandbox backend: warm containers through the Docker API (Docker or podman).

Heavy parts (the docker SDK) are imported when a sandbox starts, not here.
"""
