# Sourced by the executables the Pulumi engine starts (pulumi-resource-opbroker beside this file,
# policypack/pulumi-analyzer-opbroker): sets $python to the interpreter that has opbroker installed, given $here,
# the folder of this file. The engine starts them with its own PATH, not the user's shell's, so "python3 on
# PATH" is the last resort, not the rule. In order:
#   $OPBROKER_PYTHON, when set;
#   the checkout's virtualenv (scripts/setup.sh), when this is provider/ of a checkout: $here/../.venv;
#   an installed package (site-packages/opbroker/provider): the virtualenv holding it (the first folder above
#     with a pyvenv.cfg), else the prefix's own pythonX.Y (<prefix>/lib/pythonX.Y/site-packages/...);
#   python3 on PATH.
python="${OPBROKER_PYTHON:-}"
if [ -z "$python" ] && [ -x "$here/../.venv/bin/python" ]; then
  python="$here/../.venv/bin/python"
fi
if [ -z "$python" ]; then
  dir=$here
  while [ "$dir" != / ] && [ -n "$dir" ]; do
    if [ -f "$dir/pyvenv.cfg" ] && [ -x "$dir/bin/python" ]; then
      python="$dir/bin/python"
      break
    fi
    dir=$(dirname "$dir")
  done
fi
if [ -z "$python" ]; then
  case "$here" in
    */lib/python3.*/site-packages/opbroker/provider)
      site=${here%/opbroker/provider}
      version=$(basename "$(dirname "$site")")
      prefix=$(dirname "$(dirname "$(dirname "$site")")")
      [ -x "$prefix/bin/$version" ] && python="$prefix/bin/$version"
      ;;
  esac
fi
[ -n "$python" ] || python=python3
