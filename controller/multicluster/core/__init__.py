"""The pure core of controller.multicluster: decisions without I/O.

Checked by the controller-pure-core import contract (pyproject.toml), which finds these
packages by place: a module put here is checked, one put elsewhere is not."""
