"""`python -m dflash_cache.fetch`: the cache Job's download step (dflash_cache.fetch.program)."""

import sys

from dflash_cache.fetch.program import main

sys.exit(main())
