import sys

from zoscii_statissa.main import main

sys.exit(main())
