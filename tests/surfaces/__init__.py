"""What users touch: the CLI, the HTTP service, the docs, the dev server, deployments."""
