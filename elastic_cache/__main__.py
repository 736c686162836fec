"""``python -m elastic_cache`` is the ``ecache`` command."""

from elastic_cache.cli import main

raise SystemExit(main())
