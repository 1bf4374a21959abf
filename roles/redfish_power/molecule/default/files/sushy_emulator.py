"""`sushy-emulator` whose fake driver lands a power change 1-3 s after the order, not 0-11 s.

sushy-tools' fake driver applies an order at `int(time.time()) + randint(1, 11)`: the wait is
random and averages ~6 s, and this scenario makes six power changes. Drawing from 2-3 instead
keeps every change more than one second late, so the role must still poll until PowerState
shows it (its first read follows the order at once), for a few seconds rather than up to 11.
"""

import random
import sys

from sushy_tools.emulator.main import main
from sushy_tools.emulator.resources.systems import fakedriver


class _Late(random.Random):
    def randint(self, a: int, b: int) -> int:
        return super().randint(2, 3)


fakedriver.random = _Late()

if __name__ == "__main__":
    sys.argv[0] = "sushy-emulator"
    sys.exit(main())
