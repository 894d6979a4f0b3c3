"""TEST-ONLY: a module that prints to stdout when imported (see worker_sdk.testing.mcp_tools.test_noisy)."""
import os
import sys

print("_noisy_import: print at import time")
sys.stdout.flush()
os.write(1, b"_noisy_import: raw fd 1 write at import time\n")
