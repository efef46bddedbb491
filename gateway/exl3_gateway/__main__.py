"""python -m exl3_gateway (with gateway/ on the path): the same as gateway/exl3-gateway."""

import sys

from .server import main

sys.exit(main())
