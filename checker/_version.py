"""gradguard's version, in one place (the package, the CLI, reports and the verdict cache read it)."""

VERSION = "0.1.0"
