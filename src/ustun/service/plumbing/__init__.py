"""HTTP plumbing: middleware, bodies, conditional requests, problems, authentication,
dependencies."""
