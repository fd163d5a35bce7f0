"""Allow ``python -m pase``."""

import sys

from pase.cli import main

sys.exit(main())
