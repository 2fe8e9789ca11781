"""The ``metacog`` command line: ``metacog info``, ``metacog demo`` (see :mod:`metacog_fast.cli.main`)."""
