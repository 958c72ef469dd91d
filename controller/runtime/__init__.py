"""The controller's own framework (issue 45), which the kinds stand on. It grows here piece by piece: so far the
process's lifecycle (:mod:`.lifecycle`: the event loop that runs the controller, and its graceful stop). The
framework imports no kind (``pyproject.toml``'s import contracts)."""
