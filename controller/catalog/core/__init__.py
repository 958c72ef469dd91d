"""The pure core of the catalog kind: its decisions without I/O.

Checked by the controller-pure-core import contract (pyproject.toml), which finds the controller's core packages
by place: a module put here is checked, one put elsewhere is not."""
