# Sourced by typecheck.sh and architecture.sh, from the repository root.
# Tools that walk the source (mypy, import-linter's grimp) cannot follow setuptools' editable-install import hook
# (opbroker.api -> api/), so they read the packages through a tree of symlinks that mirrors the installed layout:
# .typecheck/opbroker/<folder> -> <folder>. Put .typecheck on their path.
tree=.typecheck/opbroker
mkdir -p "$tree"
for pkg in api osbclient kubeclient rendering gorender broker controller devcluster provider components stacks cli; do
  ln -sfn "../../$pkg" "$tree/$pkg"
done
