"""The Kubernetes API client as the broker and the controller both use it: deadlines on every call and typed
answers. A thin edge over the official client, below both in the layers, so neither keeps its own copy."""
