"""``python -m metacog_fast`` = the ``metacog`` command."""
import sys

from metacog_fast.cli.main import main

sys.exit(main())
