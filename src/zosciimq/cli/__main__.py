import sys

from zosciimq.cli.main import main

sys.exit(main())
