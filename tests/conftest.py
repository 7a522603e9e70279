"""Test configuration: the IR is verified after every pass while tests run."""

import os
import sys

os.environ.setdefault("THUNDER_IR_VERIFY", "1")
# Triton decides between compiled and interpreted kernels when a kernel is defined, its
# own library's helpers included, so the interpreter (the Triton executor's tests run on the
# CPU through it) must be chosen before anything imports triton: Inductor, which the
# torch.compile tests run, imports it too.
os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, os.path.dirname(__file__))
