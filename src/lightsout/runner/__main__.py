"""`python -m lightsout.runner`: see `lightsout.runner.main`."""

import sys

from lightsout.runner.main import main

if __name__ == "__main__":
    sys.exit(main())
