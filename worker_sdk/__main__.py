"""`python -m worker_sdk SPAWN_SPEC.json`: run one worker attempt (see worker_sdk.runtime)."""
import sys

from worker_sdk.runtime import main

sys.exit(main())
