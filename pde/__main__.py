from pde.cli import main

raise SystemExit(main())
