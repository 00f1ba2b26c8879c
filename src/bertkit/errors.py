"""The one exception type bertkit raises for bad input: the CLI prints it as one line and exits 2."""


class BertkitError(Exception):
    """A problem with the user's input (a file, a config, a model folder), stated in one line.

    The message names what is wrong and where: the file, the line and the field when there is one.
    """
