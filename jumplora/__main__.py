import sys

from jumplora.cli import main

sys.exit(main())
