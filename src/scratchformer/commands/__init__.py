"""What each ``scratchformer`` command does: one function per command, taking the parsed
arguments and returning the exit status. ``cli.py`` names them in its table and imports a
module only when one of its commands runs, so that light commands stay light."""
