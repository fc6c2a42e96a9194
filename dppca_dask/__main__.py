"""``python -m dppca_dask``: the ``dppca-dask`` command line."""

import sys

from dppca_dask.cli import main

sys.exit(main())
