"""The controller: one framework (``runtime/``) and the kinds it runs, each a folder (``osb/``, ``catalog/``,
``claims/``, ``servicecatalog/``, ``multicluster/``) with its pure ``core/``; ``app.py`` wires them, ``running.py``
is the process. See docs/controller.md, "The layout"."""
