from gateway.server.cli import main

raise SystemExit(main())
