import sys

from dflash_operator.runtime.cli import main

sys.exit(main())
