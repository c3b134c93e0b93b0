import sys

from dflash_operator.cli import main

sys.exit(main())
