"""Plan templates: the rendering engine (pure, no cluster access)."""
