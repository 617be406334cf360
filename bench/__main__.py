"""``uv run python -m bench [--quick] [--soak SECONDS] [--profile]``: see bench/README.md."""

from bench.run import main

raise SystemExit(main())
