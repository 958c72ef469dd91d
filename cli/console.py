"""The two consoles every command prints through: results to stdout, problems to stderr.

``soft_wrap`` keeps long lines (file paths, URLs, curl commands) whole, so they can be copied and grepped.
"""

from rich.console import Console

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)
