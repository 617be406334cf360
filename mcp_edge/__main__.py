from mcp_edge.server.cli import main

raise SystemExit(main())
