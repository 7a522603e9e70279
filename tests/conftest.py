"""Test configuration: the IR is verified after every pass while tests run."""

import os
import sys

os.environ.setdefault("THUNDER_IR_VERIFY", "1")
sys.path.insert(0, os.path.dirname(__file__))
