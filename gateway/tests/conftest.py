"""pytest set-up of the gateway tests: the gateway package importable from gateway/, and the
paths the tests share (repository, build directory with exl3-launch)."""

import os
import sys

GATEWAY_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(GATEWAY_DIR)
sys.path.insert(0, GATEWAY_DIR)
