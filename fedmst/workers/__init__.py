"""Where and how the agents run (:mod:`fedmst.workers.backends`)."""

DEFAULT_IMAGE = "fedmst-worker"
"""The Docker image of ``--workers docker`` unless ``--image`` says otherwise (built from the
repository's Dockerfile); declared here, light, so the option schema reads it without Docker's code."""
